"""The Docker options an instance plan becomes (no daemon needed: cards and NFS servers are
not on this machine, so their options are checked here and the rest runs for real in
test_system)."""

import pytest

from contracts.engines.plan import ContainerPlan, Mount
from workers.runtimes.base import InstanceError, InstanceRequest
from workers.runtimes.docker import publish_address, run_options


def options(tmp_path, node_address="127.0.0.1", **plan):
    base = {"image": "img", "args": ["serve", "--port", "8000"], "port": 8000}
    request = InstanceRequest("svc", "svc-1", "h", ContainerPlan(**{**base, **plan}), "gpu:2,3")
    address = publish_address(node_address)
    return run_options(request, model_dir=str(tmp_path), bind_address=address)


PUBLISHED = [("127.0.0.1", "127.0.0.1"), ("localhost", "127.0.0.1"), ("10.0.0.7", "10.0.0.7"),
             ("192.168.1.20", "192.168.1.20"), ("127.0.0.2", "127.0.0.2")]  # fmt: skip


@pytest.mark.parametrize("node_address, published", PUBLISHED)
def test_publishes_on_the_node_address_never_on_every_interface(tmp_path, node_address, published):
    assert options(tmp_path, node_address)["ports"] == {"8000/tcp": (published, None)}


def test_command_line_replaces_the_image_entrypoint(tmp_path):
    opts = options(tmp_path)
    assert (opts["entrypoint"], opts["command"]) == (["serve"], ["--port", "8000"])


def test_gpus_become_a_device_request_for_exactly_those_cards(tmp_path):
    (request,) = options(tmp_path, gpus=(2, 3))["device_requests"]
    assert request["DeviceIDs"] == ["2", "3"] and request["Capabilities"] == [["gpu"]]


def test_npu_device_paths_are_passed_through(tmp_path):
    opts = options(tmp_path, device_paths=("/dev/davinci0", "/dev/davinci_manager"))
    assert opts["devices"] == ["/dev/davinci0:/dev/davinci0:rwm",
                               "/dev/davinci_manager:/dev/davinci_manager:rwm"]  # fmt: skip


def test_labels_record_the_cards_the_instance_holds(tmp_path):
    assert options(tmp_path)["labels"]["wharf.devices"] == "gpu:2,3"


def test_binds_are_read_only_and_must_exist(tmp_path):
    (tmp_path / "m").mkdir()
    (mount,) = options(tmp_path, mounts=[Mount("bind", "/models/m", str(tmp_path / "m"))])["mounts"]
    assert (mount["Source"], mount["Target"], mount["ReadOnly"]) == (
        str(tmp_path / "m"),
        "/models/m",
        True,
    )
    with pytest.raises(InstanceError, match="'missing' is not in this node's model store"):
        options(tmp_path, mounts=[Mount("bind", "/models/x", str(tmp_path / "missing"))])


def test_nfs_uses_the_local_volume_driver(tmp_path):
    (mount,) = options(tmp_path, mounts=[Mount("nfs", "/data", "10.0.0.5:/exports/models")])[
        "mounts"
    ]
    assert mount["Type"] == "volume" and mount["ReadOnly"] is True
    config = mount["VolumeOptions"]["DriverConfig"]
    assert config["Name"] == "local"
    assert config["Options"] == {
        "type": "nfs",
        "o": "addr=10.0.0.5,ro",
        "device": ":/exports/models",
    }


def test_tmpfs_and_shared_memory(tmp_path):
    opts = options(tmp_path, mounts=[Mount("tmpfs", "/cache", size_bytes=1024, read_only=False)],
                   shm_size_bytes=2**30)  # fmt: skip
    assert opts["shm_size"] == 2**30
    assert opts["mounts"][0]["Type"] == "tmpfs"


def test_a_host_network_instance_joins_the_nodes_network_and_publishes_nothing(tmp_path):
    opts = options(tmp_path, "10.0.0.7", host_network=True)
    assert opts["network_mode"] == "host" and "ports" not in opts and "network" not in opts


def test_a_bridged_instance_is_on_its_services_own_network(tmp_path):
    assert options(tmp_path)["network"] == "wharf-svc-svc"


def test_listing_again_when_a_container_goes_between_list_and_inspect():
    from docker.errors import NotFound

    from workers.runtimes.docker import listed

    class Containers:  # docker-py's list, whose inspect of a removed container fails
        calls = 0

        def list(self, **filters):
            self.calls += 1
            if self.calls == 1:
                raise NotFound("No such container")
            return ["c"]

    client = type("Client", (), {"containers": Containers()})()
    assert listed(client, "wharf.service=s") == ["c"] and client.containers.calls == 2
