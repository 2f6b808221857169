"""moto's server, answering what CAPA asks when it changes a pool's launch template and moto
5.2.5 does not answer. Run as a script, in its own process (``MotoServer(script=...)``), with
moto's own arguments (``-H``, ``-p``):

- Instance refreshes: CAPA asks whether one is under way (``DescribeInstanceRefreshes``)
  before it writes a launch template version that changes more than user data, even with
  ``refreshPreferences.disable``, and then starts one (``StartInstanceRefresh``) unless
  disabled. moto has no instance refresh API (a 500, "not yet implemented"). Here a refresh
  replaces every instance of the group at once, as a refresh with ``MinHealthyPercentage`` 0
  does (each terminated, and the group boots its replacement from its launch template's
  newest version), and is then ``Successful``; ``DescribeInstanceRefreshes`` lists a
  group's refreshes, newest first. No warm-up, checkpoints or cancelling
  (``CancelInstanceRefresh`` stays unserved: CAPA cancels only a refresh under way).
- ``DescribeLaunchTemplateVersions`` with ``MaxVersion=$Latest``: EC2 takes ``$Latest`` for
  the newest version; moto reads the parameter as an integer and fails (a 500). CAPA asks so
  before every new version, to find one to prune. Here ``$Latest`` sets no upper bound, which
  is what it means. Pruning itself (``DeleteLaunchTemplateVersions``, once a template has
  three versions) moto does not serve either, so a test changes a pool's AMI once.
- ``CreateLaunchTemplateVersion`` keeps the user data as it came, where
  ``CreateLaunchTemplate`` decodes it; an Auto Scaling group replacing an instance from such a
  version then fails an assertion (a 500 to the ``TerminateInstances`` that set it off, and no
  replacement). Here a version's user data is read as ``CreateLaunchTemplate`` reads it.
"""

from __future__ import annotations

import sys
import uuid
from datetime import UTC, datetime
from typing import Any

from moto import server
from moto.autoscaling.responses import AutoScalingResponse
from moto.core.responses import ActionResult
from moto.ec2.models import ec2_backends
from moto.ec2.models.launch_templates import LaunchTemplate, LaunchTemplateVersion
from moto.ec2.responses.launch_templates import LaunchTemplates
from moto.ec2.utils import parse_user_data

_describe_versions = LaunchTemplates.describe_launch_template_versions
_create_version = LaunchTemplate.create_version


_refreshes: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
"""Each group's refreshes, newest first, by account, region and group name."""


def _group_key(self: AutoScalingResponse) -> tuple[str, str, str]:
    return (self.current_account, self.region, str(self._get_param("AutoScalingGroupName")))


def _describe_instance_refreshes(self: AutoScalingResponse) -> ActionResult:
    return ActionResult({"InstanceRefreshes": _refreshes.get(_group_key(self), [])})


def _start_instance_refresh(self: AutoScalingResponse) -> ActionResult:
    key = _group_key(self)
    group = self.autoscaling_backend.autoscaling_groups[key[2]]
    started = datetime.now(UTC)
    instances = [state.instance.id for state in group.active_instances()]
    if instances:
        ec2_backends[self.current_account][self.region].terminate_instances(instances)
        self.autoscaling_backend.notify_terminate_instances(instances)
    refresh = {
        "InstanceRefreshId": str(uuid.uuid4()),
        "AutoScalingGroupName": key[2],
        "Status": "Successful",
        "StatusReason": "replaced every instance at once (the test's moto)",
        "StartTime": started,
        "EndTime": datetime.now(UTC),
        "PercentageComplete": 100,
        "InstancesToUpdate": 0,
    }
    _refreshes.setdefault(key, []).insert(0, refresh)
    return ActionResult({"InstanceRefreshId": refresh["InstanceRefreshId"]})


def _describe_launch_template_versions(self: LaunchTemplates) -> ActionResult:
    as_int = self._get_int_param

    def version_param(name: str, default: Any = None) -> Any:
        if name == "MaxVersion" and self._get_param(name) == "$Latest":
            return None
        return as_int(name, default)

    self._get_int_param = version_param  # type: ignore[method-assign]
    try:
        return _describe_versions(self)
    finally:
        del self._get_int_param


def _create_version_decoded(
    self: LaunchTemplate, data: dict[str, Any], description: str
) -> LaunchTemplateVersion:
    if isinstance(data.get("UserData"), str):
        data = {**data, "UserData": parse_user_data(data["UserData"])}
    return _create_version(self, data, description)


def main() -> None:
    AutoScalingResponse.describe_instance_refreshes = _describe_instance_refreshes  # type: ignore[attr-defined]
    AutoScalingResponse.start_instance_refresh = _start_instance_refresh  # type: ignore[attr-defined]
    LaunchTemplates.describe_launch_template_versions = _describe_launch_template_versions  # type: ignore[method-assign]
    LaunchTemplate.create_version = _create_version_decoded  # type: ignore[method-assign]
    server.main(sys.argv[1:])


if __name__ == "__main__":
    main()
