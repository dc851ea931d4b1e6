from django.urls import path

from controlplane.eas_api import keys

urlpatterns = [
    path("access-keys", keys.AccessKeyList.as_view()),
    path("access-keys/<str:key_id>", keys.AccessKeyDetail.as_view()),
]
