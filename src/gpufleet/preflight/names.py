"""Every name gpufleet derives from the spec's names, checked against the limit of where it is used.

The cluster name (1-24 characters) and group names (1-32) are checked by the spec model; a name made of
both can still be too long for a cloud (a GCE resource policy ``<cluster>-<group>-placement`` can reach
67 characters, GCE allows 63). ``derived_names`` lists the names that grow with the spec's names, per
provider, each with its limit; names made of the cluster name and a short fixed suffix (``-router``,
``-lustre-range``) stay far below their limits and are listed too, so the table is the whole story.

Limits (read 2026-11-23):
- GCE resource names (instances, networks, subnetworks, firewalls, routers, resource policies, network
  tags): RFC 1035, 1-63 characters, ``[a-z]([-a-z0-9]*[a-z0-9])?``,
  https://cloud.google.com/compute/docs/naming-resources
- Host names: a DNS label, at most 63 characters (RFC 1035 2.3.4; Linux HOST_NAME_MAX is 64).
- AWS IAM role names: 64 characters, https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html;
  Pulumi auto-naming adds a dash and 7 random characters to the logical name.
- AWS launch template names: 128 characters,
  https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreateLaunchTemplate.html
- Azure (read 2026-11-27, "Naming rules and restrictions for Azure resources",
  https://learn.microsoft.com/en-us/azure/azure-resource-manager/management/resource-name-rules):
  resource groups 90, Linux VMs and scale sets 64, NICs, public IPs, NAT gateways, Bastion hosts and
  NSGs 80, AML file systems 80 characters.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from gpufleet.catalog import Catalog
from gpufleet.preflight.base import Finding, check
from gpufleet.severity import Severity
from gpufleet.spec.model import ClusterSpec, Role

_RFC1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_HOST_WHAT = {
    "gcp": "GCE instance (host) name",
    "azure": "Azure VM (host) name",
    "local": "container (host) name",
}
PULUMI_SUFFIX = 8  # "-" and 7 random characters Pulumi appends to an auto-named resource


@dataclass(frozen=True)
class DerivedName:
    what: str  # e.g. "GCE resource policy"
    name: str
    limit: int
    path: str  # the spec field whose value makes it long
    rfc1035: bool = True


def _gcp_names(spec: ClusterSpec) -> list[DerivedName]:
    names: list[DerivedName] = []
    for index, group in enumerate(spec.node_groups):
        path = f"node_groups[{index}].name"
        names.append(DerivedName("GCE network tag", f"{spec.name}-{group.name}", 63, path))
        if Role.COMPUTE in group.roles:
            names.append(DerivedName("GCE resource policy", f"{spec.name}-{group.name}-placement", 63, path))
    for suffix in ("host", "gpu-7", "gpu-7-internal", "roce", "roce-7", "router", "nat", "login"):
        names.append(DerivedName("GCE network resource", f"{spec.name}-{suffix}", 63, "name"))
    for fs_kind, what, suffix in _GCP_FILESYSTEM_NAMES:
        if spec.filesystem.kind == fs_kind:
            names.append(DerivedName(what, f"{spec.name}-{suffix}", 63, "name"))
    return names


_GCP_FILESYSTEM_NAMES = (
    ("managed_lustre", "Managed Lustre instance", "lustre"),
    ("managed_lustre", "GCE address range", "lustre-range"),
    ("filestore", "Filestore instance", "nfs"),
)


def _aws_names(spec: ClusterSpec) -> list[DerivedName]:
    names = [
        DerivedName(
            "AWS launch template (Pulumi-named)",
            f"{spec.name}-{group.name}-lt" + "-x" * (PULUMI_SUFFIX // 2),
            128,
            f"node_groups[{index}].name",
            rfc1035=False,
        )
        for index, group in enumerate(spec.node_groups)
    ]
    role = f"{spec.name}-node-role" + "-x" * (PULUMI_SUFFIX // 2)
    names.append(DerivedName("AWS IAM role (Pulumi-named)", role, 64, "name", rfc1035=False))
    return names


def _azure_names(spec: ClusterSpec) -> list[DerivedName]:
    names = [
        DerivedName("Azure scale set", f"{spec.name}-{group.name}-ib", 64, f"node_groups[{index}].name")
        for index, group in enumerate(spec.node_groups)
        if Role.COMPUTE in group.roles
    ]
    names += [
        DerivedName("Azure NIC", f"{host}-nic", 80, f"node_groups[{index}].name")
        for index, group in enumerate(spec.node_groups)
        for host in spec.host_names(group)[-1:]
    ]
    names.append(DerivedName("Azure resource group", f"gpufleet-{spec.name}", 90, "name"))
    for suffix in ("bastion-ip", "nat-ip", "bastion", "lustre", "vnet", "nsg"):
        names.append(DerivedName("Azure network resource", f"{spec.name}-{suffix}", 80, "name"))
    return names


def _local_names(spec: ClusterSpec) -> list[DerivedName]:
    return [
        DerivedName("podman network", f"gpufleet-{spec.name}", 63, "name"),
        DerivedName("podman volume", f"gpufleet-{spec.name}-shared", 63, "name"),
    ]


# What each provider's resources are called (as its component names them); bare metal makes nothing.
_PROVIDER_NAMES: dict[str, Callable[[ClusterSpec], list[DerivedName]]] = {
    "gcp": _gcp_names,
    "aws": _aws_names,
    "azure": _azure_names,
    "local": _local_names,
}


def derived_names(spec: ClusterSpec) -> list[DerivedName]:
    """The names the backends make from ``spec`` (see the module docstring for the limits)."""
    kind = spec.provider.kind
    host_what = _HOST_WHAT.get(kind, "host name")
    names = [
        DerivedName(host_what, host, 63, f"node_groups[{index}].name")
        for index, group in enumerate(spec.node_groups)
        for host in spec.host_names(group)
    ]
    return names + _PROVIDER_NAMES.get(kind, lambda _spec: [])(spec)


@check("resource_names")
def resource_names(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    reported: set[tuple[str, str]] = set()
    for derived in derived_names(spec):
        too_long = len(derived.name) > derived.limit
        if not too_long and (not derived.rfc1035 or _RFC1035.match(derived.name)):
            continue
        key = (derived.what, derived.path)
        if key in reported:  # one finding per kind of name and field, not one per host
            continue
        reported.add(key)
        if too_long:
            over = len(derived.name) - derived.limit
            message = (
                f"the {derived.what} '{derived.name}' would be {len(derived.name)} characters; the limit "
                f"is {derived.limit}: shorten the cluster or group name by {over} character(s)"
            )
        else:
            message = (
                f"the {derived.what} '{derived.name}' is not a valid name (a-z, 0-9 and '-', starting "
                "with a letter, not ending with '-')"
            )
        yield Finding(Severity.ERROR, "resource_names", derived.path, message)
