"""`python -m resources.agent --spec FILE`: the agent's entry point, also what Dagster Pipes launches.

Under Pipes the spec arrives in the Pipes extras, progress goes to the Dagster UI as log lines, and each
load point's headline figures as a custom message.
"""

from __future__ import annotations

import sys

from resources.agent.runner import run_spec


def main(argv: list[str] | None = None) -> int:
    import os

    from dagster_pipes import DAGSTER_PIPES_CONTEXT_ENV_VAR, open_dagster_pipes

    from resources.agent.cli import stop_on_sigterm

    if os.environ.get(DAGSTER_PIPES_CONTEXT_ENV_VAR):
        stop_on_sigterm()  # a terminated Dagster run stops the engine and leaves a loadable bundle
        with open_dagster_pipes() as pipes:
            spec = pipes.get_extra("spec")
            out = run_spec(spec, log=pipes.log.info, report=pipes.report_custom_message)
            pipes.report_custom_message({"bundle": str(out)})
        return 0
    from resources.agent.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
