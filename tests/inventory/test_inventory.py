"""The inventory shape: written by every backend, read back, and hand-written for bare metal."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest
import yaml

from factories import HEAD_ROLES, make_host, make_inventory
from gpufleet.catalog.images import component_modes, load_image_manifests
from gpufleet.errors import SpecError
from gpufleet.infra.software import with_software
from gpufleet.inventory.model import (
    CLUSTER_VARS,
    NCCL_ENV_FILE,
    NCCL_TESTS_DIR,
    TORCH_VENV,
    Connection,
    Host,
    Inventory,
)
from gpufleet.inventory.stack import from_stack_outputs
from gpufleet.spec.model import FabricKind, Role

ROOT = Path(__file__).resolve().parents[2]


def sample() -> Inventory:
    return make_inventory(
        [
            make_host(
                "c-head", HEAD_ROLES, ip="10.0.0.5", instance_type="m7i.2xlarge", cpus=8, memory_mb=30000
            ),
            make_host(
                "c-gpu-0",
                ip="10.0.1.5",
                instance_type="p5.48xlarge",
                gpus=8,
                gpu_model="NVIDIA H100",
                fabric_interfaces=32,
                cpus=192,
                memory_mb=1_900_000,
            ),
        ],
        cluster="c",
        provider="aws",
        fabric=FabricKind.EFA,
        filesystem={"kind": "fsx_lustre", "mount_point": "/fsx", "dns_name": "fs-1.fsx", "mount_name": "abc"},
        connection=Connection(user="ubuntu", private_key_file="/k"),
        nccl_tests_dir="/opt/nccl-tests/build",
    )


def test_groups_and_host_vars() -> None:
    data = sample().to_ansible()["all"]
    assert set(data["children"]) == {"slurm_controller", "slurm_login", "compute"}
    assert list(data["children"]["compute"]["hosts"]) == ["c-gpu-0"]
    gpu = data["children"]["compute"]["hosts"]["c-gpu-0"]
    assert gpu["gpufleet_gpus"] == 8 and gpu["gpufleet_fabric_interfaces"] == 32
    assert gpu["ansible_host"] == "10.0.1.5"
    assert data["vars"]["gpufleet_fabric"] == "efa"
    assert data["vars"]["ansible_user"] == "ubuntu"
    assert data["vars"]["gpufleet_nccl_tests_dir"] == "/opt/nccl-tests/build"


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yml"
    sample().write(path)
    again = Inventory.read(path)
    assert again == sample()
    assert again.login.name == "c-head"
    assert [h.name for h in again.compute] == ["c-gpu-0"]


def test_controller_serves_login_when_no_login_host() -> None:
    inventory = sample()
    inventory.hosts[0].roles = [Role.CONTROLLER]
    assert inventory.login.name == "c-head"
    assert list(inventory.to_ansible()["all"]["children"]["slurm_login"]["hosts"]) == ["c-head"]


def test_from_stack_outputs() -> None:
    outputs = {
        "cluster": "c",
        "provider": "gcp",
        "fabric": "tcpxo",
        "hosts": [
            {
                "name": "c-head",
                "roles": ["controller", "login"],
                "private_ip": "10.0.0.2",
                "instance_type": "n2-standard-8",
                "cpus": 8,
                "memory_mb": 30000,
            },
            {
                "name": "c-gpu-0",
                "roles": ["compute"],
                "private_ip": "10.0.0.3",
                "instance_type": "a3-megagpu-8g",
                "gpus": 8,
                "gpu_model": "NVIDIA H100",
                "fabric_interfaces": 8,
                "cpus": 208,
                "memory_mb": 1_700_000,
            },
        ],
        "filesystem": {
            "kind": "managed_lustre",
            "mount_point": "/lustre",
            "mount_source": "10.1.0.2@tcp:/lustre",
        },
    }
    inventory = from_stack_outputs(outputs)
    assert inventory.fabric is FabricKind.TCPXO
    assert inventory.compute[0].fabric_interfaces == 8
    assert inventory.filesystem["mount_source"].endswith(":/lustre")


def test_example_baremetal_inventory_reads() -> None:
    inventory = Inventory.read(ROOT / "inventories" / "examples" / "baremetal.yml")
    assert inventory.provider == "baremetal"
    assert inventory.login.name == "head01"
    assert {h.name for h in inventory.compute} == {"dgx01", "dgx02"}
    assert all(h.gpus == 8 for h in inventory.compute)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"hosts": {}}, "expected 'all:"),
        (
            {"all": {"vars": {"gpufleet_cluster": "x"}, "children": {"compute": {"hosts": {"a": {}}}}}},
            "slurm_controller must list at least one host",
        ),
        (
            {
                "all": {
                    "vars": {"gpufleet_cluster": "x"},
                    "children": {
                        "slurm_controller": {"hosts": {"h": {"gpufleet_cpus": 2, "gpufleet_memory_mb": 100}}},
                        "compute": {"hosts": {"a": {"gpufleet_cpus": 2}}},
                    },
                }
            },
            "host a lacks gpufleet_memory_mb",
        ),
    ],
)
def test_hand_written_mistakes_are_explained(data, message) -> None:
    with pytest.raises(SpecError, match=message):
        Inventory.from_ansible(data)


def test_written_file_is_plain_yaml(tmp_path: Path) -> None:
    path = tmp_path / "i.yml"
    sample().write(path)
    text = path.read_text()
    assert text.startswith("# Ansible inventory of gpufleet cluster 'c'")
    assert yaml.safe_load(text)["all"]["vars"]["gpufleet_cluster"] == "c"


def test_gpu_stack_mode_follows_the_gpus_unless_set() -> None:
    hosts = sample().to_ansible()["all"]["children"]
    assert hosts["compute"]["hosts"]["c-gpu-0"]["gpufleet_gpu_stack"] == "install"
    assert hosts["slurm_controller"]["hosts"]["c-head"]["gpufleet_gpu_stack"] == "none"
    verify = Host(
        name="n", roles=[Role.COMPUTE], address="a", private_ip="a", instance_type="p5.48xlarge",
        gpus=8, gpu_stack="verify", cpus=1, memory_mb=1,
    )  # fmt: skip
    assert verify.gpu_stack == "verify"


def test_software_reaches_the_roles_and_reads_back(tmp_path: Path) -> None:
    from gpufleet.spec.load import parse_spec

    spec = parse_spec((ROOT / "examples" / "local.yaml").read_text())
    inventory = with_software(sample(), spec)
    written = inventory.to_ansible()["all"]["vars"]["gpufleet_software"]
    assert written["nvidia_driver"] == spec.software.nvidia_driver and written["gpu_packages"] == "repo"
    path = tmp_path / "inventory.yml"
    inventory.write(path)
    assert Inventory.read(path).software == written

    # The local backend has no NVIDIA repository: a local GPU stack comes from PyPI.
    data = yaml.safe_load((ROOT / "examples" / "local.yaml").read_text())
    data["provider"]["gpu_stack"] = True
    local = parse_spec(yaml.safe_dump(data))
    assert with_software(sample(), local).software["gpu_packages"] == "pypi"


def test_a_gpu_stack_mode_outside_the_three_is_rejected() -> None:
    data = sample().to_ansible()
    data["all"]["children"]["compute"]["hosts"]["c-gpu-0"]["gpufleet_gpu_stack"] = "reinstall"
    with pytest.raises(ValueError, match="gpu_stack"):
        Inventory.from_ansible(data)


def test_example_baremetal_inventory_verifies_dgx_os() -> None:
    inventory = Inventory.read(ROOT / "inventories" / "examples" / "baremetal.yml")
    assert {(h.gpu_arch, h.nvswitch, h.gpu_stack) for h in inventory.compute} == {("sm_90", True, "verify")}
    assert inventory.controller.gpu_stack == "none"


def test_example_baremetal_inventory_follows_the_dgx_os_7_manifest() -> None:
    """DGX OS 7 carries the driver, fabric manager and DCGM but no CUDA toolkit and no NCCL: the example
    verifies the first and installs the others, exactly as the manifest decides."""
    inventory = Inventory.read(ROOT / "inventories" / "examples" / "baremetal.yml")
    want = component_modes(load_image_manifests().images["dgx-os-7"])
    for host in inventory.compute:
        assert host.gpu_components == want, host.name
        assert (host.gpu_components["cuda"], host.gpu_components["nccl"]) == ("install", "install")
        assert (host.gpu_components["driver"], host.gpu_components["dcgm"]) == ("verify", "verify")
    written = inventory.to_ansible()["all"]["children"]["compute"]["hosts"]["dgx01"]
    assert written["gpufleet_gpu_components"] == want


def test_gpu_components_on_a_host_without_a_gpu_stack_are_refused() -> None:
    data = sample().to_ansible()
    for group in ("slurm_controller", "slurm_login"):  # the head node is written under both
        data["all"]["children"][group]["hosts"]["c-head"]["gpufleet_gpu_components"] = {"driver": "verify"}
    with pytest.raises(ValueError, match="gpu_components is set but gpu_stack is none"):
        Inventory.from_ansible(data)


def test_the_facts_python_and_the_roles_share_are_fields_written_under_their_gpufleet_names(
    tmp_path: Path,
) -> None:
    facts = {
        "baked_image_hash": "ab" * 32,
        "nccl_env_file": "/etc/site/nccl.env",
        "nccl_tests_dir": "/opt/site/nccl-tests",
        "torch_venv": "/opt/site/torch",
        "set_hostname": True,
        "node_is_container": True,
        "boot_configure": True,
        "configure_on_node": True,
    }
    assert set(facts) == set(CLUSTER_VARS)
    inventory = sample().model_copy(update=facts)
    written = inventory.to_ansible()["all"]["vars"]
    assert {var: written[var] for var in CLUSTER_VARS.values()} == {
        CLUSTER_VARS[f]: v for f, v in facts.items()
    }
    path = tmp_path / "inventory.yml"
    inventory.write(path)
    again = Inventory.read(path)
    assert again == inventory and again.extra_vars == {}
    # Unset, the paths are written as the roles' defaults and the switches not at all.
    plain = sample().to_ansible()["all"]["vars"]
    assert "gpufleet_baked_image_hash" not in plain and "gpufleet_set_hostname" not in plain
    assert plain["gpufleet_nccl_env_file"] == NCCL_ENV_FILE and plain["gpufleet_torch_venv"] == TORCH_VENV


@pytest.mark.parametrize("field", sorted(CLUSTER_VARS))
def test_extra_vars_never_carry_a_fact_that_has_a_field(field: str) -> None:
    data = {**sample().model_dump(), "extra_vars": {CLUSTER_VARS[field]: "x"}}
    with pytest.raises(
        ValueError, match=rf"extra_vars sets {CLUSTER_VARS[field]}: .* typed field .*\({field}\)"
    ):
        Inventory.model_validate(data)


@pytest.mark.parametrize(
    ("role", "variable", "fact", "default"),
    [
        ("nccl_env", "nccl_env_path", "nccl_env_file", NCCL_ENV_FILE),
        ("nccl_tests", "nccl_tests_install_dir", "nccl_tests_dir", NCCL_TESTS_DIR),
        ("pytorch", "pytorch_venv", "torch_venv", TORCH_VENV),
        ("common", "common_set_hostname", "set_hostname", "False"),
        ("slurm", "slurm_configure_on_node", "configure_on_node", "False"),
    ],
)
def test_each_role_reads_the_inventorys_fact_and_defaults_as_python_does(
    role: str, variable: str, fact: str, default: str
) -> None:
    template = yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())[variable]
    render = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(str(template)).render
    assert render() == default
    assert render({CLUSTER_VARS[fact]: "/from/the/inventory"}) == "/from/the/inventory"


def test_the_node_s_own_play_leaves_the_cross_node_checks_to_gpufleet_configure() -> None:
    """munge's cross-node check runs in a push, not in a node's own play at boot (gpufleet_configure_on_node),
    where gpufleet configure makes it once (configure/boot_wait.py)."""
    template = yaml.safe_load((ROOT / "roles" / "munge" / "defaults" / "main.yml").read_text())[
        "munge_verify"
    ]
    environment = jinja2.Environment(undefined=jinja2.ChainableUndefined)
    environment.filters["bool"] = lambda value: str(value).lower() in ("1", "true", "yes", "on")  # Ansible's
    render = environment.from_string(str(template)).render
    assert render() == "True"
    assert render({CLUSTER_VARS["configure_on_node"]: True}) == "False"
