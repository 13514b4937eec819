"""Entry point of a load generator worker process (see runner._run_multi)."""

import sys

from wattbench_agent.loadgen.runner import _worker_main

if __name__ == "__main__":
    sys.exit(_worker_main())
