"""After ``pulumi destroy``: prove that nothing tagged for the cluster is left on AWS; find expired clusters.

``find_leftovers(cluster, region)`` lists what still carries ``gpufleet:cluster=<name>``, from two angles:

- each service's own describe calls, which know a resource's state (instances not terminated, network
  interfaces, volumes, FSx file systems not yet deleted, placement groups, NAT gateways not deleted,
  Elastic IPs, security groups, subnets, VPCs, launch templates, EC2 Fleets not deleted, and IAM roles
  and instance profiles under gpufleet's path);
- the Resource Groups Tagging API, for any other tagged resource type (it also remembers resources for a
  while after they are gone, so for the types above the describe calls decide, and an ARN of another
  type it lists is asked of its own Describe call where there is one: internet gateways, route tables,
  VPC endpoints, DHCP options, images, snapshots; one that call says is gone is no leftover).

A resource whose ``gpufleet:cluster-id`` is not the cluster's is another cluster of the same name (a CI
stack's and a workstation's, or one made again after a destroy) and is no leftover of this one
(``tags.same_cluster``); one tagged before ids counts.

``find_expired(region)`` is the reaper's eye: clusters (a name and an id) whose ``gpufleet:expires-at``
has passed. The expiry is read off the live instances, whose tags every ``pulumi up`` rewrites (the
provider's default tags on the head and login instances, each fleet instance's own ``aws.ec2.Tag``),
and only without a live instance off the other resources, taking the latest; never off the volumes and
network interfaces a launch template tagged at launch (``LAUNCH_TAGGED``), whose tags an edit does not
reach (AWS audit 2026-11-27 H1). Everything here only reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from gpufleet.infra.leftovers import ExpiredCluster, ExpiryTag, Leftover, expired_clusters
from gpufleet.infra.tags import AWS_CLUSTER_ID_TAG, AWS_CLUSTER_TAG, AWS_EXPIRES_TAG, same_cluster

IAM_PATH = "/gpufleet/"  # the path gpufleet.infra.aws.iam gives its roles and instance profiles

# What EC2 tags at launch from a launch template's tag specifications (launch_template.LAUNCH_TAGGED):
# their tags are the first up's for their whole life, so their expiry says nothing of the cluster's.
LAUNCH_TAGGED = {"ec2:volume", "ec2:network-interface", "ec2:spot-instances-request"}

# ARN resource types (service:type) whose state the describe calls below know best.
_DESCRIBED = {
    "ec2:instance",
    "ec2:network-interface",
    "ec2:volume",
    "ec2:placement-group",
    "ec2:natgateway",
    "ec2:elastic-ip",
    "ec2:security-group",
    "ec2:subnet",
    "ec2:vpc",
    "ec2:launch-template",
    "ec2:fleet",
    "fsx:file-system",
    "fsx:association",
}


# Tagged types the tagging API lists that have no check of their own above: their own Describe call says
# whether the listed ARN is gone. A deleted id answers an error code ending in ".NotFound"
# (InvalidInternetGatewayID.NotFound, InvalidRouteTableID.NotFound, InvalidVpcEndpointId.NotFound,
# InvalidAMIID.NotFound, InvalidSnapshot.NotFound, InvalidDhcpOptionID.NotFound: EC2 API error codes,
# https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html, read 2026-11-24), or the
# item comes back in a deleted state (VpcEndpoint.State "deleted", Image.State "deregistered":
# API_VpcEndpoint.html and API_Image.html, read 2026-11-24).
_OWN_DESCRIBE: dict[str, tuple[str, str, str]] = {
    "ec2:internet-gateway": ("describe_internet_gateways", "InternetGatewayIds", "InternetGateways"),
    "ec2:route-table": ("describe_route_tables", "RouteTableIds", "RouteTables"),
    "ec2:vpc-endpoint": ("describe_vpc_endpoints", "VpcEndpointIds", "VpcEndpoints"),
    "ec2:dhcp-options": ("describe_dhcp_options", "DhcpOptionsIds", "DhcpOptions"),
    "ec2:image": ("describe_images", "ImageIds", "Images"),
    "ec2:snapshot": ("describe_snapshots", "SnapshotIds", "Snapshots"),
}
_DELETED_STATES = {"deleted", "deregistered"}


def _tags(items: Iterable[dict[str, Any]] | None) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in items or []}


def _paged(client: Any, operation: str, key: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
    if client.can_paginate(operation):
        for page in client.get_paginator(operation).paginate(**kwargs):
            yield from page.get(key, [])
    else:
        yield from getattr(client, operation)(**kwargs).get(key, [])


class AwsLeftovers:
    """Read-only look at one region of one account (a boto3 session's)."""

    def __init__(self, region: str, session: Any = None, cluster_id: str | None = None) -> None:
        """``cluster_id``: the id of the cluster ``find`` looks for (``gpufleet.state``), when known."""
        import boto3

        self.session = session or boto3.session.Session(region_name=region)
        self.region = region
        self._id = cluster_id

    def client(self, service: str) -> Any:
        return self.session.client(service, region_name=self.region)

    # ---- one cluster ------------------------------------------------------------------------------

    def find(self, cluster: str) -> list[Leftover]:
        """What still carries the cluster's tag (with ``cluster_id``, not what another id tags)."""
        found = self._ec2(cluster) + self._fsx(cluster) + self._iam(cluster)
        found += self._tagging(cluster)
        return found

    def _ours(self, tags: Iterable[dict[str, Any]] | None) -> bool:
        return same_cluster(_tags(tags).get(AWS_CLUSTER_ID_TAG), self._id)

    def _ec2(self, cluster: str) -> list[Leftover]:
        ec2 = self.client("ec2")
        tag = [{"Name": f"tag:{AWS_CLUSTER_TAG}", "Values": [cluster]}]
        found: list[Leftover] = []
        for reservation in _paged(ec2, "describe_instances", "Reservations", Filters=tag):
            for instance in reservation["Instances"]:
                state = instance["State"]["Name"]
                if state != "terminated" and self._ours(instance.get("Tags")):
                    found.append(Leftover("ec2 instance", instance["InstanceId"], state))
        for eni in _paged(ec2, "describe_network_interfaces", "NetworkInterfaces", Filters=tag):
            if not self._ours(eni.get("TagSet")):
                continue
            found.append(Leftover("network interface", eni["NetworkInterfaceId"], eni.get("Status", "")))
        for volume in _paged(ec2, "describe_volumes", "Volumes", Filters=tag):
            if not self._ours(volume.get("Tags")):
                continue
            found.append(Leftover("ebs volume", volume["VolumeId"], volume.get("State", "")))
        for group in ec2.describe_placement_groups(Filters=tag).get("PlacementGroups", []):
            if group.get("State") != "deleted" and self._ours(group.get("Tags")):
                found.append(Leftover("placement group", group["GroupName"], group.get("State", "")))
        for nat in _paged(ec2, "describe_nat_gateways", "NatGateways", Filter=tag):
            if nat.get("State") not in ("deleted",) and self._ours(nat.get("Tags")):
                found.append(Leftover("nat gateway", nat["NatGatewayId"], nat.get("State", "")))
        for address in ec2.describe_addresses(Filters=tag).get("Addresses", []):
            if not self._ours(address.get("Tags")):
                continue
            found.append(Leftover("elastic ip", address.get("AllocationId", address.get("PublicIp", "?"))))
        for group in _paged(ec2, "describe_security_groups", "SecurityGroups", Filters=tag):
            if not self._ours(group.get("Tags")):
                continue
            found.append(Leftover("security group", group["GroupId"], group.get("GroupName", "")))
        for subnet in _paged(ec2, "describe_subnets", "Subnets", Filters=tag):
            if not self._ours(subnet.get("Tags")):
                continue
            found.append(Leftover("subnet", subnet["SubnetId"]))
        for vpc in _paged(ec2, "describe_vpcs", "Vpcs", Filters=tag):
            if not self._ours(vpc.get("Tags")):
                continue
            found.append(Leftover("vpc", vpc["VpcId"]))
        for template in _paged(ec2, "describe_launch_templates", "LaunchTemplates", Filters=tag):
            if not self._ours(template.get("Tags")):
                continue
            found.append(
                Leftover("launch template", template["LaunchTemplateId"], template["LaunchTemplateName"])
            )
        # DescribeFleets takes no tag filter; a deleted fleet stays listed for a while in a deleted* state
        # (its instances, if any still run, are the instance check's; API_DescribeFleets, read 2026-11-24).
        for fleet in _paged(ec2, "describe_fleets", "Fleets"):
            state = fleet.get("FleetState", "")
            tags = fleet.get("Tags")
            if (
                _tags(tags).get(AWS_CLUSTER_TAG) == cluster
                and not state.startswith("deleted")
                and self._ours(tags)
            ):
                found.append(Leftover("ec2 fleet", fleet["FleetId"], state))
        return found

    def _fsx(self, cluster: str) -> list[Leftover]:
        fsx = self.client("fsx")
        found = []
        for fs in _paged(fsx, "describe_file_systems", "FileSystems"):
            tags = fs.get("Tags")
            if (
                _tags(tags).get(AWS_CLUSTER_TAG) == cluster
                and fs.get("Lifecycle") != "DELETED"
                and self._ours(tags)
            ):
                found.append(Leftover("fsx file system", fs["FileSystemId"], fs.get("Lifecycle", "")))
        return found

    def _iam(self, cluster: str) -> list[Leftover]:
        iam = self.session.client("iam")
        found = []
        for role in _paged(iam, "list_roles", "Roles", PathPrefix=IAM_PATH):
            listed = iam.list_role_tags(RoleName=role["RoleName"]).get("Tags")
            if _tags(listed).get(AWS_CLUSTER_TAG) == cluster and self._ours(listed):
                found.append(Leftover("iam role", role["RoleName"]))
        for profile in _paged(iam, "list_instance_profiles", "InstanceProfiles", PathPrefix=IAM_PATH):
            listed = iam.list_instance_profile_tags(InstanceProfileName=profile["InstanceProfileName"]).get(
                "Tags"
            )
            if _tags(listed).get(AWS_CLUSTER_TAG) == cluster and self._ours(listed):
                found.append(Leftover("iam instance profile", profile["InstanceProfileName"]))
        return found

    def _tagging(self, cluster: str) -> list[Leftover]:
        tagging = self.client("resourcegroupstaggingapi")
        found = []
        filters = [{"Key": AWS_CLUSTER_TAG, "Values": [cluster]}]
        for mapping in _paged(tagging, "get_resources", "ResourceTagMappingList", TagFilters=filters):
            arn = mapping["ResourceARN"]
            kind = _arn_type(arn)
            if kind in _DESCRIBED or not self._ours(mapping.get("Tags")):
                continue
            gone, state = self._own_state(kind, arn.rsplit("/", 1)[-1])
            if not gone:
                found.append(Leftover("tagged resource", arn, state))
        return found

    def _own_state(self, kind: str, resource_id: str) -> tuple[bool, str]:
        """What the resource's own Describe call says of an ARN the tagging API lists: (gone, state).
        Gone: not found, or in a deleted state. A type with no Describe call here stays a leftover."""
        from botocore.exceptions import ClientError

        check = _OWN_DESCRIBE.get(kind)
        if check is None:
            return False, ""
        operation, ids, key = check
        try:
            items = getattr(self.client("ec2"), operation)(**{ids: [resource_id]}).get(key, [])
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code", "").endswith(".NotFound"):
                return True, "not found"
            raise
        if not items:
            return True, "not found"
        state = str(items[0].get("State", ""))
        return state.lower() in _DELETED_STATES, state

    # ---- every cluster --------------------------------------------------------------------------------

    def expired(self, now: datetime | None = None) -> list[ExpiredCluster]:
        """Clusters in this region whose expiry has passed (see the module doc for which tags say so)."""
        found: list[ExpiryTag] = []

        def note(tags: dict[str, str], live: bool) -> None:
            found.append(
                ExpiryTag(
                    tags.get(AWS_CLUSTER_TAG), tags.get(AWS_EXPIRES_TAG), tags.get(AWS_CLUSTER_ID_TAG), live
                )
            )

        tagging = self.client("resourcegroupstaggingapi")
        filters = [{"Key": AWS_EXPIRES_TAG}]
        for mapping in _paged(tagging, "get_resources", "ResourceTagMappingList", TagFilters=filters):
            kind = _arn_type(mapping["ResourceARN"])
            if kind != "ec2:instance" and kind not in LAUNCH_TAGGED:
                note(_tags(mapping.get("Tags")), live=False)
        ec2 = self.client("ec2")
        live = [
            {"Name": "tag-key", "Values": [AWS_EXPIRES_TAG]},
            {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]},
        ]
        for reservation in _paged(ec2, "describe_instances", "Reservations", Filters=live):
            for instance in reservation["Instances"]:
                note(_tags(instance.get("Tags")), live=True)
        return expired_clusters(found, now or datetime.now(UTC))


def _arn_type(arn: str) -> str:
    """``ec2:instance`` for ``arn:aws:ec2:us-east-1:123456789012:instance/i-0abc``."""
    parts = arn.split(":", 5)
    if len(parts) < 6:
        return ""
    resource = parts[5].split("/", 1)[0].split(":", 1)[0]
    return f"{parts[2]}:{resource}"


def find_leftovers(
    cluster: str, region: str, *, session: Any = None, cluster_id: str | None = None
) -> list[Leftover]:
    return AwsLeftovers(region, session, cluster_id).find(cluster)


def find_expired(region: str, *, now: datetime | None = None, session: Any = None) -> list[ExpiredCluster]:
    return AwsLeftovers(region, session).expired(now)
