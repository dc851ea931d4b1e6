from django.urls import path

from controlplane.batches import internal

urlpatterns = [
    path("v1/files", internal.files),
    path("v1/files/<str:file_id>", internal.one_file),
    path("v1/files/<str:file_id>/content", internal.file_content),
    path("v1/batches", internal.batches),
    path("v1/batches/<str:batch_id>", internal.one_batch),
    path("v1/batches/<str:batch_id>/cancel", internal.cancel),
]
