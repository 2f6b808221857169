"""AWSMachinePool specs the provider cannot honour are refused at admission, naming the field."""

from __future__ import annotations

from typing import Any

import pytest
from tests.support.resources import AWSMACHINEPOOLS
from tests.support.waiting import until_admission_answers

from machinepool.providers.aws import webhook as aws_webhook
from machinepool.runtime import VALIDATING_WEBHOOKS, Client, Forbidden, Invalid
from machinepool.webhooks import register_validation, serve

CONFIG = f"validation.awsmachinepool.{AWSMACHINEPOOLS.group}"


def pool(name: str, min_size: int, max_size: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "minSize": min_size,
            "maxSize": max_size,
            "availabilityZones": ["us-east-1a"],
            "awsLaunchTemplate": {"instanceType": "t3.small", "ami": {"id": "ami-12345678"}},
        },
    }


async def test_min_size_above_max_size_is_rejected_at_admission(
    client: Client, crds: list[str], namespace: str
) -> None:
    server = await serve(
        "127.0.0.1",
        0,
        client=client,
        extra_routes=[(aws_webhook.VALIDATE_PATH, aws_webhook.handle)],
    )
    try:
        await register_validation(
            client,
            name=CONFIG,
            url=server.url + aws_webhook.VALIDATE_PATH,
            ca_bundle_pem=server.ca_bundle,
            api_group=AWSMACHINEPOOLS.group,
            resource="awsmachinepools",
        )
        await until_admission_answers(client, AWSMACHINEPOOLS, pool("probe", 5, 2), namespace)
        with pytest.raises((Forbidden, Invalid)) as refused:
            await client.create(AWSMACHINEPOOLS, pool("inverted", 5, 2), namespace)
        assert "spec.minSize: 5 is greater than spec.maxSize 2" in refused.value.message
        accepted = await client.create(AWSMACHINEPOOLS, pool("fine", 1, 3), namespace)
        assert accepted["spec"]["maxSize"] == 3
    finally:
        await client.delete(VALIDATING_WEBHOOKS, CONFIG)
        await server.stop()
