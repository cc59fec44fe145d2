// Metrics: the agent's counters and gauges, served at /metrics in
// Prometheus' text exposition format (version 0.0.4). docs/events.md lists
// every name. The grammar this writes:
//
//   family  = "# HELP " name SP help LF "# TYPE " name SP type LF *sample
//   sample  = name [suffix] ["{" label *("," label) "}"] SP value LF
//   label   = label-name "=" DQUOTE escaped-value DQUOTE
//   type    = "counter" / "gauge" / "summary"
//   suffix  = "_sum" / "_count"                  ; summaries only
//   value   = integer / decimal / "NaN" / "+Inf" / "-Inf"
//
// In help text "\" and LF are written "\\" and "\n"; in label values also
// DQUOTE is written "\"". Families appear in the order they were declared,
// samples of one family sorted by their labels, so the text is stable.
//
// Thread-safety: none; the agent's loop thread owns it.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trun::agent {

using Labels = std::vector<std::pair<std::string, std::string>>;

enum class MetricType { kCounter, kGauge, kSummary };

class MetricsRegistry {
 public:
  // Every name is declared once, before it is used.
  void Declare(const std::string& name, MetricType type, std::string help);
  // Counters grow by `delta`; gauges are set; summaries observe one value
  // (a summary without quantiles: its _sum and _count).
  void Add(const std::string& name, double delta, const Labels& labels = {});
  void Set(const std::string& name, double value, const Labels& labels = {});
  void Observe(const std::string& name, double value, const Labels& labels = {});
  // The value of a counter or gauge (0 when it has none); for tests.
  double Get(const std::string& name, const Labels& labels = {}) const;

  std::string Render() const;

 private:
  struct Sample {
    double value = 0;
    double count = 0;  // summaries: observations
  };
  struct Family {
    MetricType type = MetricType::kGauge;
    std::string help;
    std::map<std::string, Sample> samples;  // by rendered label set
  };
  Sample& At(const std::string& name, const Labels& labels);

  std::vector<std::string> order_;
  std::map<std::string, Family> families_;
};

// A label value or help text escaped as the format asks.
std::string EscapeLabelValue(std::string_view v);
// A sample value: integers without a decimal point, others in the shortest
// form that reads back exactly, NaN and infinities spelled as Prometheus does.
std::string FormatMetricValue(double v);

}  // namespace trun::agent
