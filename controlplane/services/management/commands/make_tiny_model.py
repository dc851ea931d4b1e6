"""`manage.py make_tiny_model DIR [--seed N]`: write the tiny Llama that vLLM serves."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand

from controlplane.services.tiny_model import write_tiny_model


class Command(BaseCommand):
    help = "Write a tiny random-weight Llama model (config, bf16 safetensors, tokenizer) to DIR."

    def add_arguments(self, parser):
        parser.add_argument("dir", type=Path, help="model directory to create or replace")
        parser.add_argument("--seed", type=int, default=0, help="weights seed (default 0)")

    def handle(self, *args, **options):
        path = write_tiny_model(options["dir"], seed=options["seed"])
        self.stdout.write(self.style.SUCCESS(f"tiny model written to {path}"))
