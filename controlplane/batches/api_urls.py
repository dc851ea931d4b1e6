from django.urls import path

from controlplane.batches import api

urlpatterns = [
    path("batches", api.BatchList.as_view()),
    path("batches/<str:batch_id>", api.BatchDetail.as_view()),
    path("batches/<str:batch_id>/errors", api.BatchErrors.as_view()),
    path("batches/<str:batch_id>/cancel", api.BatchCancel.as_view()),
    path("files/<str:file_id>/content", api.FileContent.as_view()),
]
