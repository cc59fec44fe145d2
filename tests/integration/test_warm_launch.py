"""test_launch's and test_logs's worker-contract tests, collected again and
run with warm start on (warm_helpers.py). Left out, because they run
`--no-python` workers, which warm start refuses: test_launch's
test_no_python_entrypoint and test_pet_environment_and_flag_precedence,
test_logs's test_log_dir_dev_null_disables_files."""
import test_logs
# The existing contract, run with warm start on by the fixture imported last.
from test_launch import (  # noqa: F401
    test_gloo_ddp_matches_torchrun, test_module_entrypoint, test_omp_num_threads_kept_when_set,
    test_restart_rendezvouses_again_on_the_agent_store, test_run_path_entrypoint,
    test_static_env_values, test_worker_env_matches_torchrun_standalone,
    test_worker_env_matches_torchrun_static_one_node)
from test_logs import (  # noqa: F401
    test_crash_keeps_the_tail, test_partial_lines_and_raw_bytes_survive)
from warm_helpers import once_here, warm  # noqa: F401

# test_logs's tests of where a line goes once it has left the worker.
ROUTING = ("where a line goes once it has left the worker is trun's own logic, warm or cold; "
           "test_logs runs it in both passes, and how a warm worker writes is tested in both")
for _name in ("test_redirect_all_writes_files_and_nothing_to_console",
              "test_tee_prefixes_console_and_keeps_files_raw", "test_tee_map_per_rank",
              "test_local_ranks_filter", "test_prefix_template"):
    globals()[_name] = once_here(getattr(test_logs, _name), ROUTING)
