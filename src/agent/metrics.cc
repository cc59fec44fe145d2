#include "agent/metrics.h"

#include <fmt/format.h>

#include <cassert>
#include <cmath>
#include <cstdint>

namespace trun::agent {
namespace {

std::string Escape(std::string_view v, bool quote) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

std::string RenderLabels(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    out += fmt::format("{}{}=\"{}\"", i ? "," : "", labels[i].first,
                       EscapeLabelValue(labels[i].second));
  }
  return out + "}";
}

const char* TypeName(MetricType t) {
  switch (t) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kSummary:
      return "summary";
  }
  return "untyped";
}

}  // namespace

std::string EscapeLabelValue(std::string_view v) { return Escape(v, true); }

std::string FormatMetricValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::trunc(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);
}

void MetricsRegistry::Declare(const std::string& name, MetricType type, std::string help) {
  auto [it, fresh] = families_.try_emplace(name);
  assert(fresh && "a metric is declared once");
  if (!fresh) return;
  it->second.type = type;
  it->second.help = std::move(help);
  order_.push_back(name);
}

MetricsRegistry::Sample& MetricsRegistry::At(const std::string& name, const Labels& labels) {
  auto it = families_.find(name);
  assert(it != families_.end() && "metrics are declared before use");
  return it->second.samples[RenderLabels(labels)];
}

void MetricsRegistry::Add(const std::string& name, double delta, const Labels& labels) {
  At(name, labels).value += delta;
}

void MetricsRegistry::Set(const std::string& name, double value, const Labels& labels) {
  At(name, labels).value = value;
}

void MetricsRegistry::Observe(const std::string& name, double value, const Labels& labels) {
  Sample& s = At(name, labels);
  s.value += value;
  s.count += 1;
}

double MetricsRegistry::Get(const std::string& name, const Labels& labels) const {
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  auto s = it->second.samples.find(RenderLabels(labels));
  return s == it->second.samples.end() ? 0 : s->second.value;
}

std::string MetricsRegistry::Render() const {
  std::string out;
  for (const auto& name : order_) {
    const Family& f = families_.at(name);
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, Escape(f.help, false), name,
                       TypeName(f.type));
    for (const auto& [labels, s] : f.samples) {
      if (f.type == MetricType::kSummary) {
        out += fmt::format("{}_sum{} {}\n{}_count{} {}\n", name, labels, FormatMetricValue(s.value),
                           name, labels, FormatMetricValue(s.count));
      } else {
        out += fmt::format("{}{} {}\n", name, labels, FormatMetricValue(s.value));
      }
    }
  }
  return out;
}

}  // namespace trun::agent
