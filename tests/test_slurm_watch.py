"""The decision of the watcher for Slurm jobs that wait for nodes that are down
(pipeline/runtime/slurm_watch.py); tests/test_cluster.py runs it for real, with nodes that die."""

from __future__ import annotations

from pipeline.runtime.slurm_watch import UnavailableNodesWatch, parse_squeue, waits_for_unavailable_nodes

DOWN = "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions"
SQUEUE = f"""\
41|/work/wf|{DOWN}|rule_stage_wildcards_results/a
42|/work/wf|ReqNodeNotAvail, UnavailableNodes:node2|rule_train_wildcards_results/a|b
43|/work/wf|Resources|rule_search
44|/elsewhere|ReqNodeNotAvail, UnavailableNodes:node2|rule_stage
45|/work/wf|ReqNodeNotAvail, UnavailableNodes:node2|(null)
46|/work/wf|ReqNodeNotAvail, Reserved for maintenance|rule_merge
"""


def test_squeue_lines_are_parsed_with_the_comment_last():
    jobs = parse_squeue(SQUEUE + "garbage\n")
    assert [j.job_id for j in jobs] == ["41", "42", "43", "44", "45", "46"]
    assert jobs[1].comment == "rule_train_wildcards_results/a|b" and jobs[1].rule == "train"
    assert jobs[0].reason.startswith("Nodes required") and jobs[0].rule == "stage"


def test_only_reasons_that_a_returning_node_ends_count():
    assert waits_for_unavailable_nodes("ReqNodeNotAvail, UnavailableNodes:node[2-3]")
    assert waits_for_unavailable_nodes("Nodes required for job are DOWN, DRAINED or reserved for jobs in …")
    for reason in (
        "Resources",
        "Priority",
        "None",
        "ReqNodeNotAvail, Reserved for maintenance",
        "Dependency",
    ):
        assert not waits_for_unavailable_nodes(reason), reason


def test_this_workflows_jobs_are_reported_at_once_cancelled_after_the_timeout_and_retries_at_once():
    watch = UnavailableNodesWatch("/work/wf", timeout_s=30)
    jobs = parse_squeue(SQUEUE)
    messages, cancel = watch.decide(jobs, now=100.0, down_nodes="node2")
    assert cancel == []
    # 41 and 42: not another workflow's, a busy queue's, a non-Snakemake job's, maintenance
    assert len(messages) == 2
    assert (
        "Slurm job 41 (rule stage) cannot start" in messages[0]
        and "nodes down or drained: node2" in messages[0]
    )
    assert "slurm.unavailable_nodes_timeout_s" in messages[0]

    messages, cancel = watch.decide(jobs, now=129.0, down_nodes="node2")
    assert cancel == [] and messages == []  # reported once, not yet timed out
    messages, cancel = watch.decide(jobs, now=130.0, down_nodes="node2")
    assert [j.job_id for j in cancel] == ["41", "42"]
    assert "cancelling Slurm job 41 (rule stage) after 30 s" in messages[0]
    assert "--set-resources stage:nodes=N" in messages[0]

    # The retry of a cancelled job (a new id, the same rule and wildcards), still waiting: cancelled at once.
    retry = parse_squeue(
        "47|/work/wf|ReqNodeNotAvail, UnavailableNodes:node2|rule_stage_wildcards_results/a\n"
    )
    messages, cancel = watch.decide(retry, now=131.0, down_nodes="node2")
    assert [j.job_id for j in cancel] == ["47"] and len(messages) == 1 and "again" in messages[0]
    # A job of another rule, or one that starts waiting later, gets its own full timeout.
    later = parse_squeue("48|/work/wf|ReqNodeNotAvail, UnavailableNodes:node3|rule_throughput\n")
    assert watch.decide(later, now=140.0, down_nodes="")[1] == []
    assert watch.decide(later, now=169.0, down_nodes="")[1] == []
    assert [j.job_id for j in watch.decide(later, now=170.0, down_nodes="")[1]] == ["48"]


def test_leftovers_are_this_workflows_jobs_in_any_state():
    """What `onerror` cancels: every job submitted from this workflow's directory by the executor (its
    rule_ comment), running or pending for any reason; not other directories' jobs, not jobs of others."""
    from pathlib import Path

    from pipeline.runtime.slurm_watch import leftover_jobs

    jobs = parse_squeue(SQUEUE + "47|/work/wf|None|rule_train\n")
    assert [j.job_id for j in leftover_jobs(jobs, Path("/work/wf"))] == ["41", "42", "43", "46", "47"]
    assert [j.job_id for j in leftover_jobs(jobs, Path("/elsewhere"))] == ["44"]
