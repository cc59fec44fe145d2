// Reading squeue, scontrol and sacct, on outputs captured from the cluster
// tools/slurm-cluster starts (Slurm 22.05), with the jobs trun submitted:
//   13 dist.ddp -j 2x2, succeeded          14 dist.ddp -j 2x1, rank 1 raised
//   15 utils.sh, requeued once, succeeded  16 a plain sbatch --wrap job
//   17-19 a two-role app: a het job of three components (trainer-0,
//         trainer-1, reader-0)
//   20 utils.sh --num_replicas 2, cancelled
//   21 utils.sh --max_retries 3 that always exits 7: requeued 3 times, failed
// *_running was taken while 17 and 20 ran and 21 waited to be requeued.
#include "schedulers/slurm_jobs.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "common/files.h"
#include "common/source_dir_for_tests.h"

namespace trun::schedulers::slurm {
namespace {

using specs::AppState;

std::string Fixture(const std::string& name) {
  auto dir = SourceDirForTests() / "src" / "schedulers" / "testdata" / "slurm";
  auto text = ReadFile((dir / name).string());
  EXPECT_TRUE(text.ok()) << name;
  return text.ok() ? *text : "";
}

const SlurmJob* Find(const std::vector<SlurmJob>& jobs, const std::string& id) {
  for (const auto& j : jobs) {
    if (j.job_id == id) return &j;
  }
  ADD_FAILURE() << "no job " << id;
  return nullptr;
}

TEST(SlurmStates, TorchXsMapping) {
  EXPECT_EQ(AppStateFromSlurm("PENDING"), AppState::kPending);
  EXPECT_EQ(AppStateFromSlurm("REQUEUED"), AppState::kPending);
  EXPECT_EQ(AppStateFromSlurm("RESIZING"), AppState::kPending);
  EXPECT_EQ(AppStateFromSlurm("SUSPENDED"), AppState::kPending);
  EXPECT_EQ(AppStateFromSlurm("RUNNING"), AppState::kRunning);
  EXPECT_EQ(AppStateFromSlurm("COMPLETED"), AppState::kSucceeded);
  EXPECT_EQ(AppStateFromSlurm("CANCELLED"), AppState::kCancelled);
  for (const char* failed : {"BOOT_FAIL", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
                             "PREEMPTED", "REVOKED", "TIMEOUT"}) {
    EXPECT_EQ(AppStateFromSlurm(failed), AppState::kFailed) << failed;
  }
  EXPECT_EQ(AppStateFromSlurm("COMPLETING"), AppState::kUnknown);
  EXPECT_EQ(AppStateFromSlurm("REQUEUE_HOLD"), AppState::kUnknown);
  EXPECT_EQ(AppStateFromSlurm(""), AppState::kUnknown);
  // sacct's truncation mark and its "by UID" suffix.
  EXPECT_EQ(AppStateFromSlurm("CANCELLED+"), AppState::kCancelled);
  EXPECT_EQ(AppStateFromSlurm("CANCELLED by 0"), AppState::kCancelled);
}

TEST(SqueueJson, RunningPendingAndHeterogeneousJobs) {
  auto jobs = ParseSqueueJson(Fixture("squeue_running.json"));
  ASSERT_TRUE(jobs.ok()) << jobs.status().message();
  EXPECT_EQ(jobs->size(), 9u);  // 22.05 prints every job, whatever -j says

  const SlurmJob* ddp = Find(*jobs, "13");
  ASSERT_TRUE(ddp);
  EXPECT_EQ(ddp->name, "ddp_train");
  EXPECT_EQ(ddp->state, "COMPLETED");
  EXPECT_EQ(ddp->nodes, "node[1-2]");
  EXPECT_EQ(ddp->work_dir, "/tmp/t1");
  EXPECT_EQ(ddp->het_job_id, "");
  EXPECT_EQ(ddp->user_id, "0");
  EXPECT_EQ(ddp->restarts, 0);
  EXPECT_NE(ddp->command.find("/trun/slurm/submit-"), std::string::npos);

  const SlurmJob* failed = Find(*jobs, "14");
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->state, "FAILED");
  EXPECT_EQ(failed->reason, "NonZeroExitCode");
  EXPECT_EQ(failed->exit_code, "143:0");

  const SlurmJob* second = Find(*jobs, "18");
  ASSERT_TRUE(second);
  EXPECT_EQ(second->het_job_id, "17");
  EXPECT_EQ(second->het_offset, 1);
  EXPECT_EQ(second->name, "trainer-1");
  EXPECT_EQ(second->state, "RUNNING");
  EXPECT_EQ(second->nodes, "node1");

  const SlurmJob* requeued = Find(*jobs, "21");
  ASSERT_TRUE(requeued);
  EXPECT_EQ(requeued->state, "PENDING");
  EXPECT_EQ(requeued->reason, "BeginTime");
  EXPECT_EQ(requeued->restarts, 1);
  EXPECT_EQ(requeued->nodes, "");
}

TEST(SqueueJson, FinishedJobs) {
  auto jobs = ParseSqueueJson(Fixture("squeue_finished.json"));
  ASSERT_TRUE(jobs.ok()) << jobs.status().message();
  EXPECT_EQ(Find(*jobs, "20")->state, "CANCELLED");
  EXPECT_EQ(Find(*jobs, "20")->exit_code, "0:15");
  EXPECT_EQ(Find(*jobs, "21")->state, "FAILED");
  EXPECT_EQ(Find(*jobs, "21")->exit_code, "7:0");
  EXPECT_EQ(Find(*jobs, "21")->restarts, 3);
  EXPECT_EQ(Find(*jobs, "19")->state, "COMPLETED");
}

TEST(SqueueJson, NewerShapes) {
  // 23.11 and later: job_state a list, numbers as {"set", "number"}.
  auto jobs = ParseSqueueJson(R"({"jobs": [{"job_id": 5, "name": "t-0",
      "job_state": ["RUNNING", "COMPLETING"], "het_job_id": {"set": true, "number": 5},
      "het_job_offset": {"set": true, "number": 0}, "restart_cnt": {"set": true, "number": 2},
      "exit_code": {"status": ["SUCCESS"], "return_code": {"set": true, "number": 0}},
      "nodes": "gpu7"}], "errors": []})");
  ASSERT_TRUE(jobs.ok()) << jobs.status().message();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].state, "RUNNING");
  EXPECT_EQ((*jobs)[0].het_job_id, "5");
  EXPECT_EQ((*jobs)[0].restarts, 2);
  EXPECT_EQ((*jobs)[0].exit_code, "0:0");
}

TEST(SqueueJson, TheControllerDownIsUnavailableThoughSqueueExitedZero) {
  auto jobs = ParseSqueueJson(Fixture("squeue_unreachable.json"));
  ASSERT_FALSE(jobs.ok());
  EXPECT_EQ(jobs.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(jobs.status().message().find("Failed while looking for jobs"), std::string::npos);
}

TEST(SqueueJson, NotJsonIsAnIOError) {
  auto jobs = ParseSqueueJson("squeue: unrecognized option '--json'\n");
  ASSERT_FALSE(jobs.ok());
  EXPECT_EQ(jobs.status().code(), StatusCode::kIOError);
}

TEST(Scontrol, TheSameJobsAsSqueue) {
  auto text = Fixture("scontrol_running.txt");
  auto jobs = ParseScontrolJobs(text);
  auto json = ParseSqueueJson(Fixture("squeue_running.json"));
  ASSERT_TRUE(json.ok());
  ASSERT_EQ(jobs.size(), json->size());
  for (const auto& j : *json) {
    const SlurmJob* s = Find(jobs, j.job_id);
    ASSERT_TRUE(s);
    EXPECT_EQ(s->name, j.name);
    EXPECT_EQ(s->state, j.state);
    EXPECT_EQ(s->het_job_id, j.het_job_id);
    EXPECT_EQ(s->het_offset, j.het_offset);
    EXPECT_EQ(s->nodes, j.nodes);
    EXPECT_EQ(s->work_dir, j.work_dir);
    EXPECT_EQ(s->restarts, j.restarts);
    EXPECT_EQ(s->user_id, j.user_id);
    EXPECT_EQ(s->exit_code, j.exit_code);
  }
  EXPECT_EQ(Find(jobs, "21")->reason, "BeginTime");
  EXPECT_EQ(Find(jobs, "16")->command, "");  // a --wrap job has Command=(null)
}

TEST(Scontrol, ValuesWithSpaces) {
  auto jobs = ParseScontrolJobs(
      "JobId=3 JobName=my job UserId=alice(1000) JobState=CANCELLED Reason=None "
      "Comment=two words Command=/home/a b/run.sh WorkDir=/home/a b\n");
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].name, "my job");
  EXPECT_EQ(jobs[0].user_id, "1000");
  EXPECT_EQ(jobs[0].command, "/home/a b/run.sh");
  EXPECT_EQ(jobs[0].work_dir, "/home/a b");
  EXPECT_EQ(jobs[0].reason, "None");
}

TEST(Sacct, TheJobCompletionFileLastRowWinsAndCountsRequeues) {
  auto jobs = ParseSacct(Fixture("sacct_c.txt"));
  ASSERT_EQ(jobs.size(), 8u);
  const SlurmJob* requeued = Find(jobs, "21");
  ASSERT_TRUE(requeued);
  EXPECT_EQ(requeued->state, "FAILED");
  EXPECT_EQ(requeued->exit_code, "7:0");
  EXPECT_EQ(requeued->restarts, 3);
  EXPECT_EQ(Find(jobs, "15")->state, "COMPLETED");
  EXPECT_EQ(Find(jobs, "15")->restarts, 1);
  EXPECT_EQ(Find(jobs, "14")->nodes, "node[1-2]");
  EXPECT_EQ(Find(jobs, "19")->name, "reader-0");
  EXPECT_EQ(Find(jobs, "20")->work_dir, "/tmp/t2");
}

TEST(Sacct, StepsAreNotJobsAndComponentsAreNamed) {
  // sacct with a database: steps as ID.batch, components as ID+K.
  auto jobs = ParseSacct(
      "JobID|JobName|State|ExitCode|NodeList|WorkDir\n"
      "40+0|t-0|CANCELLED by 1000|0:15|gpu1|/w\n"
      "40+0.batch|batch|CANCELLED|0:15|gpu1|\n"
      "40+1|t-1|CANCELLED by 1000|0:15|gpu2|/w\n"
      "40+1.0|sh|CANCELLED|0:15|gpu2|\n"
      "41|x|PENDING|0:0|None assigned|/w\n");
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(jobs[0].het_job_id, "40");
  EXPECT_EQ(jobs[1].het_offset, 1);
  EXPECT_EQ(jobs[1].state, "CANCELLED");
  EXPECT_EQ(jobs[2].nodes, "");
}

}  // namespace
}  // namespace trun::schedulers::slurm
