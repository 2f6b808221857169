"""moto's server, with EKS playing the parts of Amazon EKS that CAPA's AWSManagedControlPlane
and AWSManagedMachinePool need and moto 5.2.1 does not play. Run as a script, in its own
process (``MotoServer(script=...)``), with moto's own arguments (``-H``, ``-p``):

- ``MOTO_EKS_ENDPOINT`` / ``MOTO_EKS_CA`` (base64 PEM): every EKS cluster's endpoint and
  certificate authority. moto makes up both, with no Kubernetes API behind them; the test
  points them at a workload apiserver it runs (CAPA writes them into the cluster's kubeconfig
  Secret and then talks to that cluster).
- The cluster security group: EKS makes one per cluster (tagged ``aws:eks:cluster-name``) and
  returns its ID as ``resourcesVpcConfig.clusterSecurityGroupId``; moto makes none, and CAPA
  fails without it (``describing EKS cluster security group``).
- The endpoint access defaults EKS reports (public on, private off, ``0.0.0.0/0``), and an
  ``UpdateClusterConfig`` that changes only the fields it names. moto reports none of them and
  replaces the whole ``resourcesVpcConfig`` with the update's (dropping the subnets and the
  security group); CAPA, seeing public access off, updates the cluster on every reconcile.
- ``ListAddons``: moto has no add-on API (a 404); CAPA lists a cluster's add-ons on every
  reconcile. Here a cluster has none, which is what EKS answers for a cluster made without.
- The node group's Auto Scaling group: moto's node group names one (``resources``) that does
  not exist. Here, as EKS's node group engine does, ``CreateNodegroup`` makes it (a launch
  template of moto's first image and the group's instance type, the node group's subnets and
  scaling config), ``UpdateNodegroupConfig`` resizes it, ``DeleteNodegroup`` deletes it and
  its instances. CAPA builds the pool's providerIDList from that group's instances.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from moto import server
from moto.autoscaling.models import autoscaling_backends
from moto.core.responses import ActionResult
from moto.ec2.models import ec2_backends
from moto.eks import urls
from moto.eks.models import Cluster, EKSBackend, Nodegroup
from moto.eks.responses import EKSResponse

CLUSTER_SG_TAG = "aws:eks:cluster-name"

_cluster_init = Cluster.__init__


def _init_cluster(self: Cluster, *args: Any, **kwargs: Any) -> None:
    _cluster_init(self, *args, **kwargs)
    self.endpoint = os.environ["MOTO_EKS_ENDPOINT"]
    self.certificate_authority = {"data": os.environ["MOTO_EKS_CA"]}
    account, region = kwargs["account_id"], kwargs["region_name"]
    ec2 = ec2_backends[account][region]
    config = self.resources_vpc_config
    vpc = ec2.get_subnet(config["subnetIds"][0]).vpc_id
    group = ec2.create_security_group(
        name=f"eks-cluster-sg-{self.name}",
        description="EKS created security group applied to the cluster",
        vpc_id=vpc,
        tags={CLUSTER_SG_TAG: self.name},
    )
    config["clusterSecurityGroupId"] = group.id
    config["vpcId"] = vpc
    config.setdefault("endpointPublicAccess", True)
    config.setdefault("endpointPrivateAccess", False)
    config.setdefault("publicAccessCidrs", ["0.0.0.0/0"])


_update_cluster_config = EKSBackend.update_cluster_config


def _update_cluster(self: EKSBackend, *args: Any, **kwargs: Any) -> Any:
    cluster = self.clusters.get(kwargs.get("name", ""))
    if cluster is not None and kwargs.get("resources_vpc_config"):
        kwargs["resources_vpc_config"] = {
            **cluster.resources_vpc_config,
            **kwargs["resources_vpc_config"],
        }
    return _update_cluster_config(self, *args, **kwargs)


def _list_addons(self: EKSResponse) -> ActionResult:
    self.eks_backend.describe_cluster(name=self._get_param("name"))  # 404 for no cluster
    return ActionResult({"addons": []})


def _group_name(ng: Nodegroup) -> str:
    return str(ng.resources["autoScalingGroups"][0]["name"])


def _sizes(ng: Nodegroup) -> tuple[int, int, int]:
    config = ng.scaling_config
    desired = int(config.get("desiredSize", 1))
    return int(config.get("minSize", desired)), int(config.get("maxSize", desired)), desired


_create_nodegroup = EKSBackend.create_nodegroup
_update_nodegroup_config = EKSBackend.update_nodegroup_config
_delete_nodegroup = EKSBackend.delete_nodegroup


def _create(self: EKSBackend, *args: Any, **kwargs: Any) -> Nodegroup:
    ng = _create_nodegroup(self, *args, **kwargs)
    name = _group_name(ng)
    ec2 = ec2_backends[self.account_id][self.region_name]
    template = ec2.create_launch_template(
        name=name,
        description=f"EKS managed node group {ng.nodegroup_name}",
        template_data={"ImageId": next(iter(ec2.amis)), "InstanceType": ng.instance_types[0]},
        tag_spec={},
    )
    low, high, desired = _sizes(ng)
    tags = {"eks:cluster-name": ng.cluster_name, "eks:nodegroup-name": ng.nodegroup_name}
    autoscaling_backends[self.account_id][self.region_name].create_auto_scaling_group(
        name=name,
        availability_zones=[],
        desired_capacity=desired,
        max_size=high,
        min_size=low,
        launch_config_name="",
        launch_template={"LaunchTemplateId": template.id, "Version": "$Latest"},
        vpc_zone_identifier=",".join(ng.subnets),
        default_cooldown=None,
        health_check_period=None,
        health_check_type=None,
        load_balancers=[],
        target_group_arns=[],
        placement_group=None,
        termination_policies=[],
        tags=[
            {
                "ResourceId": name,
                "ResourceType": "auto-scaling-group",
                "Key": key,
                "Value": value,
                "PropagateAtLaunch": "true",
            }
            for key, value in tags.items()
        ],
    )
    return ng


def _update(self: EKSBackend, *args: Any, **kwargs: Any) -> Any:
    update = _update_nodegroup_config(self, *args, **kwargs)
    if kwargs.get("scaling_config"):
        ng = self.clusters[kwargs["cluster_name"]].nodegroups[kwargs["nodegroup_name"]]
        backend = autoscaling_backends[self.account_id][self.region_name]
        group = backend.autoscaling_groups[_group_name(ng)]
        group.min_size, group.max_size, desired = _sizes(ng)
        backend.set_desired_capacity(group.name, desired)
    return update


def _delete(self: EKSBackend, cluster_name: str, nodegroup_name: str) -> Nodegroup:
    ng = _delete_nodegroup(self, cluster_name=cluster_name, nodegroup_name=nodegroup_name)
    name = _group_name(ng)
    autoscaling_backends[self.account_id][self.region_name].delete_auto_scaling_group(name)
    ec2_backends[self.account_id][self.region_name].delete_launch_template(name, None)
    return ng


def main() -> None:
    Cluster.__init__ = _init_cluster  # type: ignore[method-assign]
    EKSBackend.update_cluster_config = _update_cluster  # type: ignore[method-assign]
    EKSResponse.list_addons = _list_addons  # type: ignore[attr-defined]
    urls.url_paths["{0}/clusters/(?P<name>[^/]+)/addons$"] = urls.response.dispatch
    EKSBackend.create_nodegroup = _create  # type: ignore[method-assign]
    EKSBackend.update_nodegroup_config = _update  # type: ignore[method-assign]
    EKSBackend.delete_nodegroup = _delete  # type: ignore[method-assign]
    server.main(sys.argv[1:])


if __name__ == "__main__":
    main()
