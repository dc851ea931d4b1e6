"""EAS's queue API read from requests (contracts.queue_calls), its items on the wire
(contracts.queue_frames, read back by eas-prediction's own protobuf classes), and the spec's
Async services (contracts.spec_queue): pure."""

from __future__ import annotations

import pytest
from eas_prediction.queue_types.queueservice_pb2 import DataFrameListProto, DataFrameProto

from contracts.eas import normalise
from contracts.queue_calls import (
    Attributes,
    Commit,
    Delete,
    Get,
    Put,
    QueueCallError,
    Search,
    Truncate,
    Watch,
    read_call,
    wait_seconds,
)
from contracts.queue_frames import Frame, frame, frames, read_frame, read_frames
from contracts.spec import SpecError, parse_spec
from contracts.spec_cloud import cloud_only_warnings
from contracts.spec_queue import queue_settings, window


@pytest.mark.parametrize(
    ("method", "query", "websocket", "call"),
    [
        ("POST", {}, False, Put()),
        ("POST", {"task_id": "txt2img_0", "_priority_": "1"}, False,
         Put({"task_id": "txt2img_0"}, 1)),
        ("GET", {"_attrs_": "true"}, False, Attributes()),
        ("GET", {"_search_": "true", "_index_": "1033"}, False, Search(1033)),
        ("GET", {}, False, Get()),
        ("GET", {"_index_": "5", "_length_": "3", "_timeout_": "500ms", "_raw_": "false",
                 "_auto_delete_": "true", "task": "a"}, False,
         Get(5, 3, 0.5, False, True, "", {"task": "a"})),
        ("GET", {"requestId": "r-1", "_timeout_": "5s"}, False, Get(wait_s=5.0, request_id="r-1")),
        ("HEAD", {"_attrs_": "1"}, False, Attributes()),
        ("DELETE", {"_indexes_": "1, 2,3"}, False, Delete((1, 2, 3))),
        ("DELETE", {"_index_": "10", "_trunc_": "true"}, False, Truncate(10)),
        ("PUT", {"_indexes_": "7"}, False, Commit((7,))),
        ("GET", {"_watch_": "true", "_index_": "0", "_window_": "5", "_auto_commit_": "true",
                 "_index_only_": "false", "kind": "img"}, True,
         Watch(0, 5, False, True, {"kind": "img"})),
        ("GET", {}, True, Watch()),
    ],
)  # fmt: skip
def test_a_request_is_the_call_eas_documents(method, query, websocket, call):
    assert read_call(method, query, websocket) == call


@pytest.mark.parametrize(
    ("method", "query", "param"),
    [
        ("GET", {"_index_": "x"}, "_index_"),
        ("GET", {"_length_": "0"}, "_length_"),
        ("GET", {"_length_": "1001"}, "_length_"),
        ("GET", {"_timeout_": "soon"}, "_timeout_"),
        ("GET", {"_raw_": "maybe"}, "_raw_"),
        ("GET", {"_search_": "true"}, "_index_"),
        ("GET", {"_watch_": "true"}, "_watch_"),  # a watch over plain HTTP
        ("POST", {"_priority_": "2"}, "_priority_"),
        ("POST", {"a__b": "1"}, "a__b"),  # a tag's name may not nest a lookup
        ("POST", {"x" * 300: "1"}, "x" * 300),
        ("POST", {f"t{i}": "v" for i in range(17)}, "tags"),
        ("DELETE", {}, "_indexes_"),
        ("DELETE", {"_indexes_": "1,b"}, "_indexes_"),
        ("PUT", {"_indexes_": ""}, "_indexes_"),
        ("PATCH", {}, "method"),
    ],
)
def test_a_bad_request_names_its_parameter(method, query, param):
    with pytest.raises(QueueCallError) as raised:
        read_call(method, query)
    assert raised.value.param == param


@pytest.mark.parametrize(
    ("text", "seconds"),
    [(None, 0.0), ("", 0.0), ("5", 5.0), ("5s", 5.0), ("250ms", 0.25), ("1m", 60.0),
     ("10m", 60.0), ("1.5s", 1.5)],
)  # fmt: skip
def test_timeouts_as_eas_writes_them_capped_at_a_minute(text, seconds):
    assert wait_seconds(text) == seconds


ITEMS = [
    Frame(1033, b"hello\x00world", {"requestId": "abc", "lastCode": "200"}, "ok"),
    Frame(5),
    Frame(2**40, b"x" * 300, {"t": "\u00e9t\u00e9"}),
]


def test_frames_are_what_the_sdk_reads_and_back():
    listed = DataFrameListProto()
    listed.ParseFromString(frames(ITEMS))
    assert [(f.index, f.data, dict(f.tags), f.message) for f in listed.index] == [
        (i.index, i.data, i.tags, i.message) for i in ITEMS
    ]
    assert read_frames(listed.SerializeToString()) == ITEMS
    one = DataFrameProto()
    one.ParseFromString(frame(ITEMS[0]))
    assert read_frame(one.SerializeToString()) == ITEMS[0]
    with pytest.raises(ValueError):
        read_frame(b"\x1a\x05ab")  # a field longer than what is left


BASE = {"name": "sd", "containers": [{"image": "i", "command": "serve", "port": 8000}]}


def _spec(**extra):
    return parse_spec(normalise({**BASE, **extra}))


def test_an_async_service_gets_its_window_and_its_queue_bounds():
    spec = _spec(metadata={"type": "Async", "rpc.worker_threads": 3},
                 queue={"max_delivery": 1, "source": {"max_length": 50}})  # fmt: skip
    assert window(spec) == 3
    settings = queue_settings(spec)
    assert (settings.max_delivery, settings.source.max_length) == (1, 50)
    assert settings.sink.max_payload_size_kb == 1024
    assert window(_spec(metadata={"type": "Async"})) == 5  # EAS's default worker threads
    engine = {"engine": "vllm-cpu", "model": "m", "max_num_seqs": 8}
    llm = parse_spec(normalise({"name": "q", "metadata": {"type": "Async"}, "llm": engine}))
    assert window(llm) == 8


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"queue": {"max_delivery": 2}}, "queue"),  # queues are an Async service's
        ({"metadata": {"type": "Queue"}}, "metadata.type"),
        ({"metadata": {"type": "Async", "workload_type": "elasticjob"}}, "metadata.type"),
        ({"metadata": {"type": "Async"}, "queue": {"max_delivery": 0}}, "queue.max_delivery"),
        ({"metadata": {"type": "Async"}, "queue": {"sink": {"max_length": 0}}},
         "queue.sink.max_length"),
        ({"metadata": {"type": "Async"}, "queue": {"source": {"size": 1}}}, "queue.source.size"),
    ],
)  # fmt: skip
def test_what_an_async_service_may_not_be_is_named(extra, field):
    with pytest.raises(SpecError) as raised:
        _spec(**extra)
    assert field in raised.value.errors


def test_the_queue_sub_services_sizes_are_warned_and_shape_no_instance():
    plain = _spec(metadata={"type": "Async"})
    sized = _spec(metadata={"type": "Async"},
                  queue={"cpu": 1, "memory": 4000, "resource": "", "max_delivery": 1})  # fmt: skip
    warned = [w["field"] for w in cloud_only_warnings(sized.model_dump(mode="json"))]
    assert warned == ["queue.cpu", "queue.memory"]  # an empty resource is no resource
    assert plain.spec_hash() == sized.spec_hash()  # a queue's bounds restart no instance
    logged = _spec(metadata={"type": "Async"}, request_log={"enabled": True, "keep_days": 3})
    assert logged.spec_hash() == plain.spec_hash()  # nor does the gateways' request log
