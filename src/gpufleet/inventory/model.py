"""The one inventory shape every backend produces and every role reads.

Groups: ``slurm_controller``, ``slurm_login`` and ``compute``. Host variables (all ``gpufleet_``-prefixed):
instance type, GPU count and model, fabric and its interface count, CPUs and memory for Slurm, private IP.
Cluster-wide variables under ``all.vars``: cluster name, provider, fabric, filesystem, software, and the
facts Python and the roles share (``CLUSTER_VARS``: the baked image's hash, the NCCL environment file, the
nccl-tests folder, the torch virtualenv, whether the roles set the hostname), each a typed field written
under its ``gpufleet_`` name. ``extra_vars`` carries role variables a backend sets for its nodes (e.g. the
local backend's ``slurm_task_plugin``), never one of those. docs/inventory.md describes the contract for
bare-metal users who write an inventory by hand.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpufleet.catalog import load_catalog
from gpufleet.catalog.images import Component as GpuComponent
from gpufleet.catalog.images import Mode as GpuMode
from gpufleet.errors import SpecError
from gpufleet.node import FOLDER as NODE_FILES
from gpufleet.spec.model import FabricKind, Role, SchedulerKind

GROUP_OF_ROLE = {Role.CONTROLLER: "slurm_controller", Role.LOGIN: "slurm_login", Role.COMPUTE: "compute"}
ROLE_OF_GROUP = {group: role for role, group in GROUP_OF_ROLE.items()}

_HOST_FIELDS = {
    "instance_type": "gpufleet_instance_type",
    "private_ip": "gpufleet_private_ip",
    "gpus": "gpufleet_gpus",
    "gpu_model": "gpufleet_gpu_model",
    "fabric_interfaces": "gpufleet_fabric_interfaces",
    "fabric_gpudirect_rdma": "gpufleet_fabric_gpudirect_rdma",
    "fabric_mtu": "gpufleet_fabric_mtu",
    "fabric_nics": "gpufleet_fabric_nics",
    "fabric_host_nics": "gpufleet_fabric_host_nics",
    "fabric_port_gbps": "gpufleet_fabric_port_gbps",
    "fabric_nvlink_domain": "gpufleet_fabric_nvlink_domain",
    "cpus": "gpufleet_cpus",
    "memory_mb": "gpufleet_memory_mb",
    "gpu_arch": "gpufleet_gpu_arch",
    "nvswitch": "gpufleet_nvswitch",
    "gpu_stack": "gpufleet_gpu_stack",
    "gpu_components": "gpufleet_gpu_components",
    "gpu_paths": "gpufleet_gpu_paths",
}

GpuStackMode = Literal["install", "verify", "none"]

# Where the nodes keep what the validation runs: the defaults of roles/nccl_env (nccl_env_path),
# roles/nccl_tests (nccl_tests_install_dir) and roles/pytorch (pytorch_venv), which read the inventory's
# variable and fall back to the same path for a hand-written inventory (tests/inventory/test_inventory.py
# holds them equal).
NCCL_ENV_FILE = "/etc/gpufleet/nccl.env"
NCCL_TESTS_DIR = "/opt/nccl-tests/build"
TORCH_VENV = "/opt/gpufleet/torch"

# The cluster-wide facts Python and the roles share: Inventory field -> the variable under all.vars.
CLUSTER_VARS = {
    "baked_image_hash": "gpufleet_baked_image_hash",
    "nccl_env_file": "gpufleet_nccl_env_file",
    "nccl_tests_dir": "gpufleet_nccl_tests_dir",
    "torch_venv": "gpufleet_torch_venv",
    "set_hostname": "gpufleet_set_hostname",
    "node_is_container": "gpufleet_node_is_container",
    "boot_configure": "gpufleet_boot_configure",
    "configure_on_node": "gpufleet_configure_on_node",
}


class Host(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9.-]*$")
    roles: list[Role] = Field(min_length=1)
    address: str = Field(description="where Ansible connects (ansible_host)")
    private_ip: str
    instance_type: str
    gpus: int = Field(default=0, ge=0)
    gpu_model: str | None = None
    fabric_interfaces: int = Field(default=0, ge=0)
    cpus: int = Field(ge=1, description="CPUs the node declares to Slurm")
    memory_mb: int = Field(ge=1, description="RealMemory the node declares to Slurm")
    gpu_arch: str | None = Field(default=None, description="CUDA architecture of the GPU, e.g. sm_90")
    nvswitch: bool = Field(default=False, description="NVSwitch in the node: needs nvidia-fabricmanager")
    gpu_stack: GpuStackMode | None = Field(
        default=None,
        description="how the GPU roles treat the node: install, verify (the image carries the stack) or "
        "none; default install with GPUs, else none. The default of every component gpu_components "
        "leaves out",
    )
    gpu_components: dict[GpuComponent, GpuMode] = Field(
        default_factory=dict,
        description="install or verify per component, from the manifest of the image the node boots "
        "(catalog/images.yaml); a component left out follows gpu_stack",
    )
    gpu_paths: dict[Literal["cuda_home", "nccl_home", "nccl_lib_dir"], str] = Field(
        default_factory=dict,
        description="where the image keeps what it ships (NCCL's home and library folder on the DLAMI)",
    )
    # Fabric facts the fabric roles and the validation read; from the catalog's entry for the instance
    # type unless given (a bare-metal inventory of a type the catalog lacks writes them by hand).
    fabric_gpudirect_rdma: bool = Field(default=False, description="GPUDirect RDMA over the fabric")
    fabric_mtu: int | None = Field(default=None, description="MTU of the GPU NICs (GCP)")
    fabric_nics: list[str] = Field(default_factory=list, description="GPU NIC names (GCP)")
    fabric_host_nics: list[str] = Field(default_factory=list, description="host NIC names NCCL boots over")
    fabric_port_gbps: int | None = Field(default=None, description="rate of each InfiniBand port")
    fabric_nvlink_domain: int | None = Field(
        default=None, description="nodes of one multi-node NVLink domain (GB200/GB300: 18); null: none"
    )

    @model_validator(mode="after")
    def _default_gpu_stack(self) -> Host:
        if self.gpu_stack is None:
            self.gpu_stack = "install" if self.gpus > 0 else "none"
        if self.gpu_stack == "none" and self.gpu_components:
            raise ValueError(
                f"host {self.name}: gpu_components is set but gpu_stack is none (the GPU roles skip the "
                "node): leave gpu_components out, or set gpu_stack"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _fabric_from_catalog(cls, data: Any) -> Any:
        item = load_catalog().get(data.get("instance_type", "")) if isinstance(data, dict) else None
        if item is None:
            return data
        fabric = item.fabric
        facts = {
            "fabric_interfaces": fabric.interfaces,
            "fabric_gpudirect_rdma": bool(fabric.gpudirect_rdma),
            "fabric_mtu": fabric.mtu,
            "fabric_nics": list(fabric.nic_names),
            "fabric_host_nics": list(fabric.host_nic_names),
            "fabric_port_gbps": fabric.port_gbps,
            "fabric_nvlink_domain": fabric.nvlink_domain_vms,
        }
        return {**facts, **data}


class Connection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user: str = "root"
    private_key_file: str | None = None
    ssh_common_args: str | None = None
    become: bool = False  # connect as ``user`` and become root (ansible_become) for every task


class Inventory(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cluster: str
    provider: str
    fabric: FabricKind
    hosts: list[Host] = Field(min_length=1)
    filesystem: dict[str, Any] = Field(default_factory=lambda: {"kind": "none"})
    connection: Connection = Connection()
    software: dict[str, Any] = Field(
        default_factory=dict, description="the spec's software block: versions the roles install or verify"
    )
    node_files: str | None = Field(
        default=None,
        description="the folder of the files the roles copy to the nodes (gpufleet_node_files), on the "
        "machine that runs Ansible; None: this installation's gpufleet/node",
    )
    baked_image_hash: str | None = Field(
        default=None,
        description="the content hash of the baked image every node boots (null: not baked); configure "
        "skips the install phase while it is the hash of the roles and pins now",
    )
    nccl_env_file: str = Field(
        default=NCCL_ENV_FILE,
        description="the file of NCCL settings roles/nccl_env writes on every node; the validation's jobs "
        "source it",
    )
    nccl_tests_dir: str = Field(
        default=NCCL_TESTS_DIR,
        description="where the <collective>_perf binaries are on the compute nodes (roles/nccl_tests, or "
        "the local backend's MPI stand-ins)",
    )
    torch_venv: str = Field(
        default=TORCH_VENV,
        description="the virtualenv roles/pytorch makes; the training check runs its torchrun",
    )
    set_hostname: bool = Field(
        default=False,
        description="roles/common sets each node's hostname to its inventory name (AWS: the instances boot "
        "with their private DNS names)",
    )
    node_is_container: bool = Field(
        default=False,
        description="every node is a container (the local backend's podman nodes): roles/containers skips "
        "enroot's cgroup hook, roles/monitoring runs the stand-in GPU exporter",
    )
    boot_configure: bool = Field(
        default=False,
        description="every node configures itself at boot (a baked unit runs the configure phase on the node "
        "from the facts its backend handed it: gpufleet.inventory.node_facts); gpufleet configure waits for "
        "the nodes' results instead of pushing (docs/boot-configure.md)",
    )
    configure_on_node: bool = Field(
        default=False,
        description="this play runs on the node itself (the boot unit's inventory): the roles leave the "
        "cross-node checks to gpufleet configure, which makes them once for the cluster",
    )
    extra_vars: dict[str, Any] = Field(
        default_factory=dict,
        description="role variables a backend sets for its nodes; none of the fields above (CLUSTER_VARS)",
    )
    scheduler: SchedulerKind = Field(
        default=SchedulerKind.SLURM,
        description="what runs the jobs: Slurm (the roles configure it) or Kubernetes",
    )

    @model_validator(mode="after")
    def _typed_facts_not_in_extra_vars(self) -> Inventory:
        typed = sorted(set(self.extra_vars) & set(CLUSTER_VARS.values()))
        if typed:
            fields = ", ".join(field for field, var in CLUSTER_VARS.items() if var in typed)
            raise ValueError(
                f"extra_vars sets {', '.join(typed)}: the inventory has a typed field for it ({fields}); "
                "set the field instead"
            )
        return self

    def in_group(self, role: Role) -> list[Host]:
        return [host for host in self.hosts if role in host.roles]

    @property
    def controller(self) -> Host:
        return self.in_group(Role.CONTROLLER)[0]

    @property
    def login(self) -> Host:
        """The host users and gpufleet submit jobs from (the controller when no login node exists)."""
        logins = self.in_group(Role.LOGIN)
        return logins[0] if logins else self.controller

    @property
    def compute(self) -> list[Host]:
        return self.in_group(Role.COMPUTE)

    # ---- Ansible YAML ---------------------------------------------------------------------------

    def to_ansible(self) -> dict[str, Any]:
        all_vars: dict[str, Any] = {
            "gpufleet_cluster": self.cluster,
            "gpufleet_provider": self.provider,
            "gpufleet_fabric": self.fabric.value,
            "gpufleet_filesystem": self.filesystem,
            "gpufleet_node_files": self.node_files or str(NODE_FILES),
            "ansible_user": self.connection.user,
        }
        for field, var in CLUSTER_VARS.items():
            value = getattr(self, field)
            if value is not None and value is not False:  # the roles' default for an unset one is the same
                all_vars[var] = value
        if self.software:
            all_vars["gpufleet_software"] = self.software
        if self.scheduler is not SchedulerKind.SLURM:
            all_vars["gpufleet_scheduler"] = self.scheduler.value
        if self.connection.private_key_file:
            all_vars["ansible_ssh_private_key_file"] = self.connection.private_key_file
        if self.connection.ssh_common_args:
            all_vars["ansible_ssh_common_args"] = self.connection.ssh_common_args
        if self.connection.become:
            all_vars["ansible_become"] = True
        all_vars.update(self.extra_vars)
        children: dict[str, Any] = {}
        for role, group in GROUP_OF_ROLE.items():
            members = self.in_group(role)
            if role is Role.LOGIN and not members and self.in_group(Role.CONTROLLER):
                members = [self.controller]
            children[group] = {"hosts": {host.name: self._host_vars(host) for host in members}}
        return {"all": {"vars": all_vars, "children": children}}

    @staticmethod
    def _host_vars(host: Host) -> dict[str, Any]:
        data = {"ansible_host": host.address}
        data.update({var: getattr(host, field) for field, var in _HOST_FIELDS.items()})
        return data

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        header = f"# Ansible inventory of gpufleet cluster '{self.cluster}' ({self.provider}).\n"
        path.write_text(header + yaml.safe_dump(self.to_ansible(), sort_keys=False), encoding="utf-8")

    @classmethod
    def from_ansible(cls, data: dict[str, Any], *, source: str = "<inventory>") -> Inventory:
        """Read an inventory in the shape ``to_ansible`` writes (as bare-metal users write it by hand)."""
        try:
            root = data["all"]
            all_vars = dict(root.get("vars") or {})
            groups = root["children"]
        except (KeyError, TypeError):
            raise SpecError(
                f"{source}: expected 'all: {{vars: ..., children: "
                "{{slurm_controller, slurm_login, compute}}}}'",
                hint="start from inventories/examples/baremetal.yml",
            ) from None
        # A Kubernetes cluster handed over has only the nodes to validate (no Slurm controller to configure).
        named = str(all_vars.pop("gpufleet_scheduler", SchedulerKind.SLURM.value))
        if named not in {kind.value for kind in SchedulerKind}:
            raise SpecError(
                f"{source}: gpufleet_scheduler is '{named}'; it is one of "
                f"{', '.join(kind.value for kind in SchedulerKind)}"
            )
        scheduler = SchedulerKind(named)
        needed = ("compute",) if scheduler is SchedulerKind.KUBERNETES else ("slurm_controller", "compute")
        missing = [g for g in needed if not (groups.get(g) or {}).get("hosts")]
        if missing:
            raise SpecError(f"{source}: group(s) {', '.join(missing)} must list at least one host")
        hosts: dict[str, dict[str, Any]] = {}
        roles: dict[str, list[Role]] = {}
        for group, role in ROLE_OF_GROUP.items():
            for name, host_vars in ((groups.get(group) or {}).get("hosts") or {}).items():
                merged = hosts.setdefault(name, {})
                merged.update(host_vars or {})
                roles.setdefault(name, []).append(role)
        parsed = []
        for name, host_vars in hosts.items():
            fields = {field: host_vars[var] for field, var in _HOST_FIELDS.items() if var in host_vars}
            fields.setdefault("private_ip", host_vars.get("ansible_host", name))
            fields.setdefault("instance_type", "baremetal")
            problems = [
                var
                for field, var in _HOST_FIELDS.items()
                if field in ("cpus", "memory_mb") and field not in fields
            ]
            if problems:
                raise SpecError(f"{source}: host {name} lacks {', '.join(problems)} (needed for slurm.conf)")
            parsed.append(
                Host(name=name, roles=roles[name], address=host_vars.get("ansible_host", name), **fields)
            )
        connection = Connection(
            user=all_vars.pop("ansible_user", "root"),
            private_key_file=all_vars.pop("ansible_ssh_private_key_file", None),
            ssh_common_args=all_vars.pop("ansible_ssh_common_args", None),
            become=bool(all_vars.pop("ansible_become", False)),
        )
        return cls(
            cluster=all_vars.pop("gpufleet_cluster"),
            provider=all_vars.pop("gpufleet_provider", "baremetal"),
            fabric=FabricKind(all_vars.pop("gpufleet_fabric", "ethernet")),
            filesystem=all_vars.pop("gpufleet_filesystem", {"kind": "none"}),
            software=all_vars.pop("gpufleet_software", {}),
            node_files=_node_files(all_vars.pop("gpufleet_node_files", None)),
            **{field: all_vars.pop(var) for field, var in CLUSTER_VARS.items() if var in all_vars},
            hosts=parsed,
            connection=connection,
            scheduler=scheduler,
            extra_vars=all_vars,
        )

    @classmethod
    def read(cls, path: Path) -> Inventory:
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise SpecError(f"inventory {path} does not exist") from None
        except yaml.YAMLError as exc:
            raise SpecError(f"inventory {path} is not valid YAML: {exc}") from None
        return cls.from_ansible(data, source=str(path))


def _node_files(named: str | None) -> str | None:
    """``gpufleet_node_files`` as read: None where it names this installation's folder (what ``to_ansible``
    writes for None), so an inventory gpufleet wrote reads back equal and follows the installation."""
    return None if named is None or Path(named) == NODE_FILES else named
