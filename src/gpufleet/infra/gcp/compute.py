"""The cluster's VMs on GCP: placement, images, and one instance per host.

Creates:
- ``<name>-<group>-placement``: a compact placement policy per compute group (group placement,
  collocation COLLOCATED, the series' loosest max distance where it supports one); every node of the
  group carries it, except in a group that consumes a specific reservation, whose VMs carry the
  reservation's own policy when the spec names it (``capacity.placement_group``);
- ``<name>-<group>[-<i>]``: one VM per host, named as ``ClusterSpec.host_names`` says, with no external IP,
  the NICs of its layout, labels on the VM and its boot disk, and the cloud-config of
  ``gpufleet.infra.userdata`` (python3, the cluster's SSH key for the image's user) as ``user-data`` metadata.
  GPU VMs stop on host maintenance (``on_host_maintenance: TERMINATE``); Spot VMs are stopped when
  preempted. A2/A3/A4 machine types carry
  their GPUs, so no ``guest_accelerators`` block is set.
Invokes ``gcp:compute/getImage`` once per image family, unless ``provider.image`` names the image. Nodes
without an image of their own (the head node, CPU groups) boot plain Ubuntu of the GPU nodes' OS release,
so that every node installs the same Slurm (``catalog.gcp.image_family``, ``catalog.os_releases``).
"""

from __future__ import annotations

from collections.abc import Mapping

import pulumi
import pulumi_gcp as gcp

from gpufleet.catalog import InstanceType
from gpufleet.catalog.gcp import (
    VM_SCOPES,
    NicLayout,
    compact_max_distance,
    image_family,
    series_of,
)
from gpufleet.catalog.images import gcp_manifest_key
from gpufleet.infra.gcp.network import LOGIN_TAG, ClusterNetwork
from gpufleet.spec.model import CapacityMode, ClusterSpec, GcpProvider, NodeGroup, Role

RESERVATION_KEY = "compute.googleapis.com/reservation-name"
KEPT_BOOT_IMAGE = ("bootDisk.initializeParams.image",)


def placement_policy(
    parent: pulumi.Resource, name: str, spec: ClusterSpec, group: NodeGroup, marker: str
) -> gcp.compute.ResourcePolicy | None:
    """The group's compact placement policy, or None where it gets none."""
    series = series_of(group.instance_type)
    if (
        Role.COMPUTE not in group.roles
        or group.capacity.mode in (CapacityMode.RESERVATION, CapacityMode.FLEX_START)
        or not series.compact_placement
    ):
        return None
    provider = spec.provider
    assert isinstance(provider, GcpProvider)
    return gcp.compute.ResourcePolicy(
        f"{name}-{group.name}-placement",
        name=f"{name}-{group.name}-placement",
        project=provider.project,
        region=provider.region,
        group_placement_policy=gcp.compute.ResourcePolicyGroupPlacementPolicyArgs(
            collocation="COLLOCATED",
            max_distance=compact_max_distance(group.instance_type, group.count),
        ),
        description=f"{marker}: compact placement of group {group.name}",
        opts=pulumi.ResourceOptions(parent=parent),
    )


class Images:
    """Boot images by machine series: ``provider.image`` when given, else one lookup per family (the
    cluster's, ``catalog.gcp.image_family``)."""

    def __init__(self, parent: pulumi.Resource, spec: ClusterSpec, baked: str | None = None) -> None:
        """``baked``: the baked image every VM boots (``gpufleet image build``), a path or self-link."""
        self._parent = parent
        self._spec = spec
        self._fixed = baked or base_image_named(spec)
        self._found: dict[tuple[str, str], pulumi.Output[str]] = {}

    def for_type(self, instance_type: str) -> pulumi.Input[str]:
        if self._fixed:
            return self._fixed
        key = image_family(self._spec, instance_type)
        if key not in self._found:
            project, family = key
            image = gcp.compute.get_image_output(
                family=family,
                project=project,
                opts=pulumi.InvokeOutputOptions(parent=self._parent),
            )
            self._found[key] = image.self_link
        return self._found[key]


def base_image_named(spec: ClusterSpec) -> str | None:
    """The image the spec names for every VM (``provider.image``), if it names one."""
    provider = spec.provider
    assert isinstance(provider, GcpProvider)
    return provider.image


def base_image(spec: ClusterSpec, instance_type: str) -> str:
    """The image a type boots, as a path: ``provider.image``, else its family in this cluster."""
    fixed = base_image_named(spec)
    if fixed:
        return fixed
    project, family = image_family(spec, instance_type)
    return f"projects/{project}/global/images/family/{family}"


def image_manifest(spec: ClusterSpec, instance_type: str) -> str | None:
    """The manifest (catalog/images.yaml) of the image a type boots, which decides per component what the
    GPU roles verify and install; None for an image the table does not know. A baked image carries what
    its base carried."""
    return gcp_manifest_key(base_image(spec, instance_type))


# Google: "The reservation-bound provisioning model lets you create A4X, A4, or A3 Ultra VMs by using
# reserved capacity from a future reservation in calendar mode or future reservation in AI Hypercomputer"
# (RESERVATION_BOUND_DOC, read 2026-11-24). slurm-gcp sets it only then: ``if reservation.dense or
# calendar_mode: provisioningModel = "RESERVATION_BOUND"``, and otherwise leaves an ordinary reservation's
# VMs STANDARD (RESERVATION_PROPS_SOURCE, update_reservation_props). It also attaches the reservation's own
# resource policies ("use ones already attached to reservations"; "vanilla reservations don't support
# external policies").
RESERVATION_BOUND_DOC = "https://cloud.google.com/compute/docs/instances/about-reservation-bound-vms"
RESERVATION_PROPS_SOURCE = (
    "https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/02895beac250f6e3a07b2cbb9947afb510035c16/"
    "community/modules/scheduler/schedmd-slurm-gcp-v6-controller/modules/slurm_files/scripts/resume.py"
)


def reservation_bound(group: NodeGroup) -> bool:
    """Whether the group's VMs are RESERVATION_BOUND: a dense or calendar-mode reservation, as the spec
    says (``capacity.reservation_type``), else by series: a series without on-demand capacity (A3 Ultra,
    A4) is only reserved through future reservations (calendar mode or AI Hypercomputer)."""
    capacity = group.capacity
    if capacity.mode is not CapacityMode.RESERVATION:
        return False
    kind = capacity.reservation_type
    if kind is None:
        return not series_of(group.instance_type).on_demand
    return kind in ("dense", "calendar")


def reservation_policy(spec: ClusterSpec, group: NodeGroup) -> str | None:
    """The reservation's own compact placement policy (``capacity.placement_group``) as a resource path:
    in the reservation owner's project for a shared reservation (projects/OWNER/reservations/NAME), else
    the cluster's; in the cluster's region."""
    capacity = group.capacity
    if capacity.mode is not CapacityMode.RESERVATION or capacity.placement_group is None:
        return None
    provider = spec.provider
    assert isinstance(provider, GcpProvider)
    project = provider.project
    reservation = capacity.reservation or ""
    if reservation.startswith("projects/"):
        project = reservation.split("/")[1]
    region = provider.region
    return f"projects/{project}/regions/{region}/resourcePolicies/{capacity.placement_group}"


def _scheduling(group: NodeGroup, gpu: bool, compact: bool) -> gcp.compute.InstanceSchedulingArgs | None:
    """How the VM is bought. A dense or calendar-mode reservation's VMs are RESERVATION_BOUND (they only
    ever run on it, ``reservation_bound``); an ordinary reservation's are STANDARD. Flex-start VMs (DWS)
    run for ``max_run_duration``
    and are deleted then, without automatic restart (pulumi-gcp's InstanceSchedulingArgs). A VM under a
    compact placement policy cannot live-migrate: it terminates on host maintenance, GPUs or not (as
    slurm-gcp's resume.py sets whenever a VM carries resource policies)."""
    mode = group.capacity.mode
    if mode is CapacityMode.SPOT:
        return gcp.compute.InstanceSchedulingArgs(
            provisioning_model="SPOT",
            preemptible=True,
            automatic_restart=False,
            instance_termination_action="STOP",
            on_host_maintenance="TERMINATE",
        )
    if mode is CapacityMode.FLEX_START:
        duration = group.capacity.max_run_duration
        assert duration is not None  # the spec requires it with flex_start
        return gcp.compute.InstanceSchedulingArgs(
            provisioning_model="FLEX_START",
            automatic_restart=False,
            instance_termination_action="DELETE",
            on_host_maintenance="TERMINATE",
            max_run_duration=gcp.compute.InstanceSchedulingMaxRunDurationArgs(
                seconds=int(duration.total_seconds())
            ),
        )
    if mode is CapacityMode.RESERVATION and reservation_bound(group):
        return gcp.compute.InstanceSchedulingArgs(
            provisioning_model="RESERVATION_BOUND",
            on_host_maintenance="TERMINATE" if gpu or compact else None,
            automatic_restart=True,
        )
    if gpu or compact:
        return gcp.compute.InstanceSchedulingArgs(
            provisioning_model="STANDARD", on_host_maintenance="TERMINATE", automatic_restart=True
        )
    return None


def _reservation(group: NodeGroup) -> gcp.compute.InstanceReservationAffinityArgs | None:
    capacity = group.capacity
    if capacity.mode is CapacityMode.FLEX_START:
        # Flex-start capacity comes from DWS, never from a reservation (FLEX_START_DOC's gcloud example).
        return gcp.compute.InstanceReservationAffinityArgs(type="NO_RESERVATION")
    if capacity.mode is not CapacityMode.RESERVATION or capacity.reservation is None:
        return None
    return gcp.compute.InstanceReservationAffinityArgs(
        type="SPECIFIC_RESERVATION",
        specific_reservation=gcp.compute.InstanceReservationAffinitySpecificReservationArgs(
            key=RESERVATION_KEY, values=[capacity.reservation]
        ),
    )


def instance(
    parent: pulumi.Resource,
    *,
    hostname: str,
    spec: ClusterSpec,
    group: NodeGroup,
    item: InstanceType | None,
    layout: NicLayout,
    network: ClusterNetwork,
    image: pulumi.Input[str],
    policy: gcp.compute.ResourcePolicy | None,
    labels: Mapping[str, str],
    metadata: Mapping[str, pulumi.Input[str]],
    depends_on: list[pulumi.Resource],
    keep_image: bool = False,
) -> gcp.compute.Instance:
    provider = spec.provider
    assert isinstance(provider, GcpProvider)
    series = series_of(group.instance_type)
    gpu = item is not None and item.gpu is not None
    own_policy = reservation_policy(spec, group)
    policies = policy.self_link if policy is not None else own_policy
    tags = [f"{spec.name}-{group.name}"]
    if group in spec.login_groups:
        tags.append(f"{spec.name}-{LOGIN_TAG}")
    return gcp.compute.Instance(
        hostname,
        name=hostname,
        project=provider.project,
        zone=provider.zone,
        machine_type=group.instance_type,
        boot_disk=gcp.compute.InstanceBootDiskArgs(
            auto_delete=True,
            initialize_params=gcp.compute.InstanceBootDiskInitializeParamsArgs(
                image=image,
                size=group.root_volume_gib,
                type=series.boot_disk_type,
                labels=dict(labels),
            ),
        ),
        network_interfaces=network.interfaces(layout),
        scheduling=_scheduling(group, gpu, compact=policies is not None),
        reservation_affinity=_reservation(group),
        resource_policies=policies,
        service_account=gcp.compute.InstanceServiceAccountArgs(scopes=list(VM_SCOPES)),
        labels=dict(labels),
        metadata=dict(metadata),
        tags=tags,
        allow_stopping_for_update=True,
        deletion_protection=False,
        # The boot image of the first 'pulumi up' stays: a baked image made later (or a newer family
        # image) does not replace a live VM (as on AWS, docs/gcp.md); a new VM boots the current one.
        opts=pulumi.ResourceOptions(
            parent=parent, depends_on=depends_on, ignore_changes=list(KEPT_BOOT_IMAGE) if keep_image else None
        ),
    )
