"""The node's NCCL environment file, rendered outside Ansible from the source the fabric roles write it from.

On a Slurm node the fabric role (efa, infiniband, ethernet) hands roles/nccl_env its ``__<role>_nccl_env``
(the transport its settings select, its settings, the inventory's override; ``vars/main.yml``), and
roles/nccl_env renders ``templates/nccl.env.j2`` to /etc/gpufleet/nccl.env. Kubernetes pods cannot run the
role, so ``render`` makes the same file for them (a ConfigMap, ``validate.kubernetes.manifests``): it
finds the role that serves the fabric (its ``__<role>_fabrics``), loads that role's and roles/nccl_env's
defaults and vars, and renders the same template with Ansible's own templating and the inventory's facts.
One source, two renderings: a setting changed in a role's defaults changes both.

What a role finds on the node itself is not there (no facts are gathered and nothing runs on a node): EFA's
plugin folder (the image's own ``LD_LIBRARY_PATH`` stands), the HCAs and GID index of InfiniBand and RoCE
(NCCL finds them), Ethernet's default-route interface (NCCL picks one); such a setting comes out empty, and an
empty setting is not exported, as the role does (roles/nccl_env/vars/main.yml).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpufleet.errors import ValidationRunError

ENV_ROLE = "nccl_env"
TEMPLATE = Path("templates") / "nccl.env.j2"
MANAGED = (
    "rendered by gpufleet from roles/nccl_env and the fabric role's defaults (gpufleet.configure.nccl_env)"
)


@dataclass(frozen=True)
class NcclEnvFile:
    """One rendering of the file: its text, and what it configures."""

    role: str  # the fabric role whose settings it holds
    fabric: str
    transport: str  # GPUFLEET_TRANSPORT, the gate's name of the network NCCL must use
    settings: dict[str, str]  # what the file exports after the profiles (empty values left out)
    text: str


def _roles_dir() -> Path:
    from gpufleet.configure.runner import project_root

    return project_root() / "roles"


def _load(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return data if isinstance(data, dict) else {}


def role_vars(role: str, roles: Path | None = None) -> dict[str, Any]:
    """A role's defaults with its vars on top (Ansible's precedence), untemplated."""
    folder = (roles or _roles_dir()) / role
    return {**_load(folder / "defaults" / "main.yml"), **_load(folder / "vars" / "main.yml")}


def fabric_role(fabric: str, roles: Path | None = None) -> str:
    """The role that writes the file for ``fabric``: the one whose ``__<role>_fabrics`` lists it and that
    hands roles/nccl_env its ``__<role>_nccl_env``."""
    root = roles or _roles_dir()
    serving = []
    for folder in sorted(path for path in root.iterdir() if path.is_dir()):
        data = _load(folder / "vars" / "main.yml")
        if fabric in (data.get(f"__{folder.name}_fabrics") or []) and f"__{folder.name}_nccl_env" in data:
            serving.append(folder.name)
    if len(serving) != 1:
        found = ", ".join(serving) or "none"
        raise ValidationRunError(
            f"no single fabric role renders the NCCL environment of fabric '{fabric}' outside a node (found: "
            f"{found})",
            hint="docs/kubernetes.md lists the fabrics scheduler kubernetes supports",
        )
    return serving[0]


def render(
    fabric: str,
    host_vars: Mapping[str, Any],
    *,
    hostname: str,
    path: str,
    roles: Path | None = None,
) -> NcclEnvFile:
    """The file roles/nccl_env would write for ``fabric`` on a node with ``host_vars`` (the inventory's
    ``gpufleet_*`` variables, ``Inventory.to_ansible``'s all.vars and host vars), with nothing found on a
    node. ``hostname`` and ``path`` are what the file's comments name."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    root = roles or _roles_dir()
    role = fabric_role(fabric, root)
    variables: dict[str, Any] = {
        **role_vars(ENV_ROLE, root),
        **role_vars(role, root),
        **dict(host_vars),
        "gpufleet_fabric": fabric,
        "inventory_hostname": hostname,
        "ansible_managed": MANAGED,
        "nccl_env_path": path,
    }
    hand = f"__{role}_nccl_env"
    variables.update(
        nccl_env_transport=f"{{{{ {hand}.transport }}}}",
        nccl_env_settings=f"{{{{ {hand}.settings }}}}",
        nccl_env_override=f"{{{{ {hand}.override }}}}",
        nccl_env_library_path=f"{{{{ {hand}.library_path | default([]) }}}}",
        nccl_env_profiles=[],
    )
    templar = Templar(loader=DataLoader(), variables=_trusted(variables, trust_as_template))
    source = (root / ENV_ROLE / TEMPLATE).read_text(encoding="utf-8")
    text = str(templar.template(trust_as_template(source)))
    transport = str(templar.template(trust_as_template("{{ nccl_env_transport }}")))
    settings = templar.template(trust_as_template("{{ __nccl_env_settings }}"))
    return NcclEnvFile(
        role,
        fabric,
        transport,
        {str(key): str(value) for key, value in dict(settings).items()},
        text if text.endswith("\n") else text + "\n",
    )


def _trusted(value: Any, trust: Any) -> Any:
    """The roles' own strings may be templates (they are trusted: they come from this checkout)."""
    if isinstance(value, str):
        return trust(value)
    if isinstance(value, dict):
        return {key: _trusted(item, trust) for key, item in value.items()}
    if isinstance(value, list):
        return [_trusted(item, trust) for item in value]
    return value
