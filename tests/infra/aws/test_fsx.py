"""FSx for Lustre: deployment types, throughput, encryption, the subnet, the S3 association."""

from __future__ import annotations

from aws_specs import aws_spec

FSX = "aws:fsx/lustreFileSystem:LustreFileSystem"
DRA = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"


def test_persistent_2(plan_aws):
    fs = {
        "kind": "fsx_lustre",
        "size_gib": 4800,
        "deployment_type": "PERSISTENT_2",
        "throughput_per_tib": 500,
    }
    recorded = plan_aws(aws_spec(filesystem=fs))
    (lustre,) = recorded.of_type(FSX)
    inputs = lustre.inputs
    assert inputs["deploymentType"] == "PERSISTENT_2", lustre.urn
    assert inputs["storageCapacity"] == 4800, lustre.urn
    assert inputs["perUnitStorageThroughput"] == 500, lustre.urn
    assert inputs["storageType"] == "SSD", lustre.urn
    assert inputs["fileSystemTypeVersion"] == "2.15", lustre.urn
    # Encrypted at rest with the AWS managed key aws/fsx: no kmsKeyId means that key, not "unencrypted".
    assert "kmsKeyId" not in inputs, lustre.urn
    assert inputs["automaticBackupRetentionDays"] == 0 and inputs["skipFinalBackup"] is True, lustre.urn
    (subnet,) = [s for s in recorded.of_type("aws:ec2/subnet:Subnet") if s.name == "fleet-private"]
    from gpufleet.infra.plan import fake_id

    assert inputs["subnetIds"] == fake_id("subnet-", subnet.name), f"{lustre.urn}: not in the cluster subnet"
    assert recorded.of_type(DRA) == []


def test_scratch_2_has_no_throughput_setting(plan_aws):
    fs = {"kind": "fsx_lustre", "size_gib": 1200, "deployment_type": "SCRATCH_2", "throughput_per_tib": None}
    recorded = plan_aws(aws_spec(filesystem=fs))
    (lustre,) = recorded.of_type(FSX)
    assert lustre.inputs["deploymentType"] == "SCRATCH_2", lustre.urn
    assert "perUnitStorageThroughput" not in lustre.inputs, lustre.urn
    assert "automaticBackupRetentionDays" not in lustre.inputs, lustre.urn


def test_s3_data_repository_association(plan_aws):
    repo = {"s3_path": "s3://bucket/prefix", "file_system_path": "/data", "auto_export": True}
    fs = {"kind": "fsx_lustre", "size_gib": 2400, "data_repository": repo}
    recorded = plan_aws(aws_spec(filesystem=fs))
    (lustre,) = recorded.of_type(FSX)
    (dra,) = recorded.of_type(DRA)
    from gpufleet.infra.plan import fake_id

    assert dra.inputs["fileSystemId"] == fake_id("fs-", lustre.name), dra.urn
    assert dra.inputs["dataRepositoryPath"] == "s3://bucket/prefix", dra.urn
    assert dra.inputs["fileSystemPath"] == "/data", dra.urn
    assert dra.inputs["batchImportMetaDataOnCreate"] is True, dra.urn
    events = ["NEW", "CHANGED", "DELETED"]
    assert dra.inputs["s3"]["autoImportPolicy"]["events"] == events, dra.urn
    assert dra.inputs["s3"]["autoExportPolicy"]["events"] == events, dra.urn
    assert dra.inputs["deleteDataInFilesystem"] is False, dra.urn


def test_filesystem_outputs(plan_aws):
    recorded = plan_aws(
        aws_spec(filesystem={"kind": "fsx_lustre", "size_gib": 1200, "mount_point": "/scratch"})
    )
    fs = recorded.outputs["filesystem"]
    assert fs["kind"] == "fsx_lustre" and fs["mount_point"] == "/scratch", fs
    assert fs["dns_name"].endswith(".fsx.us-east-1.amazonaws.com") and fs["dns_name"].startswith("fs-"), fs
    assert fs["mount_name"].isalnum() and len(fs["mount_name"]) == 8, fs
    assert plan_aws(aws_spec()).outputs["filesystem"] == {"kind": "none"}


def test_lz4_compression_by_default_and_none_on_request(plan_aws):
    fs = {"kind": "fsx_lustre", "size_gib": 4800}
    (lustre,) = plan_aws(aws_spec(filesystem=fs)).of_type(FSX)
    assert lustre.inputs["dataCompressionType"] == "LZ4", lustre.urn
    (plain,) = plan_aws(aws_spec(filesystem={**fs, "compression": "NONE"})).of_type(FSX)
    assert plain.inputs["dataCompressionType"] == "NONE", plain.urn


def test_efa_enabled_fsx_gets_metadata_and_all_traffic_with_the_nodes(plan_aws):
    fs = {"kind": "fsx_lustre", "size_gib": 4800, "efa": True}
    recorded = plan_aws(aws_spec(filesystem=fs))
    (lustre,) = recorded.of_type(FSX)
    assert lustre.inputs["efaEnabled"] is True, lustre.urn
    assert lustre.inputs["metadataConfiguration"] == {"mode": "AUTOMATIC"}, lustre.urn
    every = [
        r.name
        for kind in ("Ingress", "Egress")
        for r in recorded.of_type(f"aws:vpc/securityGroup{kind}Rule:SecurityGroup{kind}Rule")
        if r.inputs.get("ipProtocol") == "-1" and "efa" in r.name
    ]
    assert sorted(every) == sorted(
        f"fleet-{label}-efa-{way}"
        for label in ("fsx-sg-self", "fsx-sg-nodes", "sg-fsx")
        for way in ("in", "out")
    ), every
    (plain,) = plan_aws(aws_spec(filesystem={**fs, "efa": False})).of_type(FSX)
    assert "efaEnabled" not in plain.inputs and "metadataConfiguration" not in plain.inputs, plain.urn


def test_efa_fsx_is_persistent_2_only():
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="PERSISTENT_2 only"):
        aws_spec(
            filesystem={"kind": "fsx_lustre", "size_gib": 2400, "deployment_type": "SCRATCH_2", "efa": True}
        )
