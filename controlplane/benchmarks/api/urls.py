from django.urls import path

from controlplane.benchmarks.api.runs import BenchmarkRuns
from controlplane.benchmarks.api.tokenizer import ServiceTokenizer

# Included before the services' URLs, whose last pattern takes any services/<name>/<action>.
urlpatterns = [
    path("services/<str:name>/benchmarks", BenchmarkRuns.as_view()),
    path("services/<str:name>/tokenizer", ServiceTokenizer.as_view()),
]
