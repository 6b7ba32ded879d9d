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

``find_expired(region)`` is the reaper's eye: clusters whose ``gpufleet:expires-at`` has passed.
Everything here only reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from gpufleet.infra.leftovers import ExpiredCluster, Leftover, expired_clusters
from gpufleet.infra.tags import AWS_CLUSTER_TAG, AWS_EXPIRES_TAG

IAM_PATH = "/gpufleet/"  # the path gpufleet.infra.aws.iam gives its roles and instance profiles

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

    def __init__(self, region: str, session: Any = None) -> None:
        import boto3

        self.session = session or boto3.session.Session(region_name=region)
        self.region = region

    def client(self, service: str) -> Any:
        return self.session.client(service, region_name=self.region)

    # ---- one cluster ------------------------------------------------------------------------------

    def find(self, cluster: str) -> list[Leftover]:
        found = self._ec2(cluster) + self._fsx(cluster) + self._iam(cluster)
        found += self._tagging(cluster)
        return found

    def _ec2(self, cluster: str) -> list[Leftover]:
        ec2 = self.client("ec2")
        tag = [{"Name": f"tag:{AWS_CLUSTER_TAG}", "Values": [cluster]}]
        found: list[Leftover] = []
        for reservation in _paged(ec2, "describe_instances", "Reservations", Filters=tag):
            for instance in reservation["Instances"]:
                state = instance["State"]["Name"]
                if state != "terminated":
                    found.append(Leftover("ec2 instance", instance["InstanceId"], state))
        for eni in _paged(ec2, "describe_network_interfaces", "NetworkInterfaces", Filters=tag):
            found.append(Leftover("network interface", eni["NetworkInterfaceId"], eni.get("Status", "")))
        for volume in _paged(ec2, "describe_volumes", "Volumes", Filters=tag):
            found.append(Leftover("ebs volume", volume["VolumeId"], volume.get("State", "")))
        for group in ec2.describe_placement_groups(Filters=tag).get("PlacementGroups", []):
            if group.get("State") != "deleted":
                found.append(Leftover("placement group", group["GroupName"], group.get("State", "")))
        for nat in _paged(ec2, "describe_nat_gateways", "NatGateways", Filter=tag):
            if nat.get("State") not in ("deleted",):
                found.append(Leftover("nat gateway", nat["NatGatewayId"], nat.get("State", "")))
        for address in ec2.describe_addresses(Filters=tag).get("Addresses", []):
            found.append(Leftover("elastic ip", address.get("AllocationId", address.get("PublicIp", "?"))))
        for group in _paged(ec2, "describe_security_groups", "SecurityGroups", Filters=tag):
            found.append(Leftover("security group", group["GroupId"], group.get("GroupName", "")))
        for subnet in _paged(ec2, "describe_subnets", "Subnets", Filters=tag):
            found.append(Leftover("subnet", subnet["SubnetId"]))
        for vpc in _paged(ec2, "describe_vpcs", "Vpcs", Filters=tag):
            found.append(Leftover("vpc", vpc["VpcId"]))
        for template in _paged(ec2, "describe_launch_templates", "LaunchTemplates", Filters=tag):
            found.append(
                Leftover("launch template", template["LaunchTemplateId"], template["LaunchTemplateName"])
            )
        # DescribeFleets takes no tag filter; a deleted fleet stays listed for a while in a deleted* state
        # (its instances, if any still run, are the instance check's; API_DescribeFleets, read 2026-11-24).
        for fleet in _paged(ec2, "describe_fleets", "Fleets"):
            state = fleet.get("FleetState", "")
            if _tags(fleet.get("Tags")).get(AWS_CLUSTER_TAG) == cluster and not state.startswith("deleted"):
                found.append(Leftover("ec2 fleet", fleet["FleetId"], state))
        return found

    def _fsx(self, cluster: str) -> list[Leftover]:
        fsx = self.client("fsx")
        found = []
        for fs in _paged(fsx, "describe_file_systems", "FileSystems"):
            if _tags(fs.get("Tags")).get(AWS_CLUSTER_TAG) == cluster and fs.get("Lifecycle") != "DELETED":
                found.append(Leftover("fsx file system", fs["FileSystemId"], fs.get("Lifecycle", "")))
        return found

    def _iam(self, cluster: str) -> list[Leftover]:
        iam = self.session.client("iam")
        found = []
        for role in _paged(iam, "list_roles", "Roles", PathPrefix=IAM_PATH):
            tags = _tags(iam.list_role_tags(RoleName=role["RoleName"]).get("Tags"))
            if tags.get(AWS_CLUSTER_TAG) == cluster:
                found.append(Leftover("iam role", role["RoleName"]))
        for profile in _paged(iam, "list_instance_profiles", "InstanceProfiles", PathPrefix=IAM_PATH):
            tags = _tags(
                iam.list_instance_profile_tags(InstanceProfileName=profile["InstanceProfileName"]).get("Tags")
            )
            if tags.get(AWS_CLUSTER_TAG) == cluster:
                found.append(Leftover("iam instance profile", profile["InstanceProfileName"]))
        return found

    def _tagging(self, cluster: str) -> list[Leftover]:
        tagging = self.client("resourcegroupstaggingapi")
        found = []
        filters = [{"Key": AWS_CLUSTER_TAG, "Values": [cluster]}]
        for mapping in _paged(tagging, "get_resources", "ResourceTagMappingList", TagFilters=filters):
            arn = mapping["ResourceARN"]
            kind = _arn_type(arn)
            if kind in _DESCRIBED:
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
        """Clusters in this region with at least one resource whose expiry tag has passed."""
        pairs: list[tuple[str | None, str | None]] = []

        def note(tags: dict[str, str]) -> None:
            pairs.append((tags.get(AWS_CLUSTER_TAG), tags.get(AWS_EXPIRES_TAG)))

        tagging = self.client("resourcegroupstaggingapi")
        filters = [{"Key": AWS_EXPIRES_TAG}]
        for mapping in _paged(tagging, "get_resources", "ResourceTagMappingList", TagFilters=filters):
            if _arn_type(mapping["ResourceARN"]) != "ec2:instance":
                note(_tags(mapping.get("Tags")))
        ec2 = self.client("ec2")
        live = [
            {"Name": "tag-key", "Values": [AWS_EXPIRES_TAG]},
            {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]},
        ]
        for reservation in _paged(ec2, "describe_instances", "Reservations", Filters=live):
            for instance in reservation["Instances"]:
                note(_tags(instance.get("Tags")))
        return expired_clusters(pairs, now or datetime.now(UTC))


def _arn_type(arn: str) -> str:
    """``ec2:instance`` for ``arn:aws:ec2:us-east-1:123456789012:instance/i-0abc``."""
    parts = arn.split(":", 5)
    if len(parts) < 6:
        return ""
    resource = parts[5].split("/", 1)[0].split(":", 1)[0]
    return f"{parts[2]}:{resource}"


def find_leftovers(cluster: str, region: str, *, session: Any = None) -> list[Leftover]:
    return AwsLeftovers(region, session).find(cluster)


def find_expired(region: str, *, now: datetime | None = None, session: Any = None) -> list[ExpiredCluster]:
    return AwsLeftovers(region, session).expired(now)
