"""EAS's autoscaler, cronscaler and label calls through EAS's own SDK against a live Wharf:
each is an update of the spec's section (a new version), refused in EAS's shape when the
section does not validate."""

from __future__ import annotations

import json

import pytest
from alibabacloud_eas20210701 import models as eas

from controlplane.services.models import Service
from tests.eas_openapi_support import REGION, key_pair, refusal, sdk

pytestmark = pytest.mark.django_db(transaction=True)

SPEC = {"metadata": {"name": "tiny", "instance": 1},
        "llm": {"engine": "vllm-cpu", "model": "tiny-llama"}}  # fmt: skip
Strategy = eas.CreateServiceAutoScalerRequestScaleStrategies
Job = eas.CreateServiceCronScalerRequestScaleJobs


@pytest.fixture
def client(live_server, settings, redis_url):
    settings.REDIS_URL = redis_url
    settings.CELERY_BROKER_URL = redis_url.replace("unix://", "redis+socket://", 1)
    from controlplane import intents

    intents._celery.cache_clear()
    key, secret = key_pair("alice")
    client = sdk(live_server.url, key.key_id, secret)
    client.create_service(eas.CreateServiceRequest(body=json.dumps(SPEC)))
    yield client
    intents._celery.cache_clear()


def spec() -> dict:
    return Service.objects.get(name="tiny").spec


def test_create_describe_update_and_delete_an_autoscaler(client):
    qps = [Strategy(metric_name="qps", threshold=10)]
    client.create_service_auto_scaler(
        REGION, "tiny", eas.CreateServiceAutoScalerRequest(min=1, max=4, scale_strategies=qps)
    )
    assert spec()["autoscaler"]["max"] == 4
    shown = client.describe_service_auto_scaler(REGION, "tiny").body
    assert (shown.min_replica, shown.max_replica) == (1, 4)
    assert shown.scale_strategies[0].metric_name == "qps"
    five = [eas.UpdateServiceAutoScalerRequestScaleStrategies(metric_name="qps", threshold=5)]
    change = eas.UpdateServiceAutoScalerRequest(min=1, max=6, scale_strategies=five)
    client.update_service_auto_scaler(REGION, "tiny", change)
    assert spec()["autoscaler"]["max"] == 6
    client.delete_service_auto_scaler(REGION, "tiny")
    assert "autoscaler" not in spec()
    assert Service.objects.get(name="tiny").versions.count() == 4  # each a version
    exc = refusal(lambda: client.describe_service_auto_scaler(REGION, "tiny"))
    assert (exc.status_code, exc.code) == (404, "InvalidAutoScaler.NotFound")


def test_an_autoscaler_that_does_not_validate_is_refused_naming_the_field(client):
    bad = eas.CreateServiceAutoScalerRequest(
        min=5, max=2, scale_strategies=[Strategy(metric_name="qps", threshold=10)]
    )
    exc = refusal(lambda: client.create_service_auto_scaler(REGION, "tiny", bad))
    assert exc.code == "InvalidParameter" and "autoscaler" in exc.message
    assert "autoscaler" not in spec()


def test_create_describe_and_delete_a_cronscaler(client):
    jobs = [Job(name="day", schedule="0 9 * * 1-5", target_size=3)]
    client.create_service_cron_scaler(
        REGION, "tiny",
        eas.CreateServiceCronScalerRequest(scale_jobs=jobs, exclude_dates=["* * 1 1 *"]),
    )  # fmt: skip
    assert spec()["cronscaler"]["scaleJobs"][0]["targetSize"] == 3  # stored canonical
    shown = client.describe_service_cron_scaler(REGION, "tiny").body
    assert [(j.name, j.schedule, j.target_size) for j in shown.scale_jobs] == [
        ("day", "0 9 * * 1-5", 3)
    ]
    assert shown.exclude_dates == ["* * 1 1 *"]
    client.delete_service_cron_scaler(REGION, "tiny")
    assert "cronscaler" not in spec()


def test_a_cronscaler_with_a_bad_schedule_is_refused(client):
    jobs = [Job(name="day", schedule="every morning", target_size=3)]
    exc = refusal(lambda: client.create_service_cron_scaler(
        REGION, "tiny", eas.CreateServiceCronScalerRequest(scale_jobs=jobs)))  # fmt: skip
    assert exc.code == "InvalidParameter" and "cron" in exc.message


def test_labels_are_updated_and_deleted_as_terraforms_tags_are(client):
    change = eas.UpdateServiceLabelRequest(labels={"team": "search", "tier": "gold"})
    client.update_service_label(REGION, "tiny", change)
    assert spec()["labels"] == {"team": "search", "tier": "gold"}
    client.delete_service_label(REGION, "tiny", eas.DeleteServiceLabelRequest(keys=["tier"]))
    assert spec()["labels"] == {"team": "search"}
    exc = refusal(lambda: client.delete_service_label(
        REGION, "tiny", eas.DeleteServiceLabelRequest(keys=["nope"])))  # fmt: skip
    assert exc.code == "InvalidParameter" and "nope" in exc.message
