from django.apps import AppConfig


class BenchmarksConfig(AppConfig):
    name = "controlplane.benchmarks"
    label = "benchmarks"
