#include "agent/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace trun::agent {
namespace {

TEST(MetricsTest, RendersPrometheusText) {
  MetricsRegistry m;
  m.Declare("trun_restarts_total", MetricType::kCounter, "Restarts, by cause.");
  m.Declare("trun_round", MetricType::kGauge, "The round.");
  m.Declare("trun_rendezvous_duration_seconds", MetricType::kSummary, "Rendezvous time.");
  m.Add("trun_restarts_total", 1, {{"cause", "failure"}});
  m.Add("trun_restarts_total", 2, {{"cause", "failure"}});
  m.Add("trun_restarts_total", 1, {{"cause", "membership"}});
  m.Set("trun_round", 4);
  m.Observe("trun_rendezvous_duration_seconds", 0.5);
  m.Observe("trun_rendezvous_duration_seconds", 0.25);
  EXPECT_EQ(m.Render(),
            "# HELP trun_restarts_total Restarts, by cause.\n"
            "# TYPE trun_restarts_total counter\n"
            "trun_restarts_total{cause=\"failure\"} 3\n"
            "trun_restarts_total{cause=\"membership\"} 1\n"
            "# HELP trun_round The round.\n"
            "# TYPE trun_round gauge\n"
            "trun_round 4\n"
            "# HELP trun_rendezvous_duration_seconds Rendezvous time.\n"
            "# TYPE trun_rendezvous_duration_seconds summary\n"
            "trun_rendezvous_duration_seconds_sum 0.75\n"
            "trun_rendezvous_duration_seconds_count 2\n");
  EXPECT_EQ(m.Get("trun_restarts_total", {{"cause", "failure"}}), 3);
  EXPECT_EQ(m.Get("trun_restarts_total", {{"cause", "nothing"}}), 0);
}

TEST(MetricsTest, FamilyWithoutSamplesStillDescribesItself) {
  MetricsRegistry m;
  m.Declare("a_total", MetricType::kCounter, "Help with \\ and\nnewline.");
  EXPECT_EQ(m.Render(), "# HELP a_total Help with \\\\ and\\nnewline.\n# TYPE a_total counter\n");
}

TEST(MetricsTest, EscapesLabelValues) {
  EXPECT_EQ(EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  MetricsRegistry m;
  m.Declare("g", MetricType::kGauge, "h");
  m.Set("g", 1, {{"run_id", "x\"y"}, {"role", "r"}});
  EXPECT_NE(m.Render().find("g{run_id=\"x\\\"y\",role=\"r\"} 1\n"), std::string::npos);
}

TEST(MetricsTest, FormatsValues) {
  EXPECT_EQ(FormatMetricValue(0), "0");
  EXPECT_EQ(FormatMetricValue(-3), "-3");
  EXPECT_EQ(FormatMetricValue(12345678901.0), "12345678901");
  EXPECT_EQ(FormatMetricValue(0.1), "0.1");
  EXPECT_EQ(FormatMetricValue(std::numeric_limits<double>::quiet_NaN()), "NaN");
  EXPECT_EQ(FormatMetricValue(INFINITY), "+Inf");
  EXPECT_EQ(FormatMetricValue(-INFINITY), "-Inf");
  EXPECT_EQ(std::stod(FormatMetricValue(1e20)), 1e20);
}

}  // namespace
}  // namespace trun::agent
