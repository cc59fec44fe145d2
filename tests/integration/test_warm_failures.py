"""test_failures's and test_signals's worker-contract tests, collected again
and run with warm start on (warm_helpers.py). Left out, because they run
`--no-python` workers, which warm start refuses: test_failures's
test_restart_count_counts_up and test_restarts_match_torchrun,
test_signals's test_stubborn_workers_are_killed_after_the_grace_period and
test_clean_exit_leaves_no_grandchild."""
# The existing contract, run with warm start on by the fixture imported last.
from test_failures import (  # noqa: F401
    test_a_signal_after_a_failure_still_writes_the_root_cause,
    test_failure_table_matches_torchrun, test_first_failure_stops_siblings_and_prints_the_table,
    test_record_traceback_reaches_the_table_and_agent_error_file,
    test_restart_succeeds_on_a_later_attempt, test_restarts_run_out, test_signal_death_is_named)
from test_signals import (  # noqa: F401
    test_kill_9_of_trun_leaves_no_worker_and_no_grandchild, test_signals_to_handle_narrows_the_set,
    test_signal_is_forwarded_and_trun_exits_128_plus)
from warm_helpers import warm  # noqa: F401
