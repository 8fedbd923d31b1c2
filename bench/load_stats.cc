#include "bench/load_stats.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/json.h"

namespace tandem::bench {

void RecordMessage(double at_s, int k, RequestResult& r) {
  if (k <= 0) return;
  if (r.output_tokens == 0) {
    r.ttft_s = at_s;
    r.itl_s.insert(r.itl_s.end(), k - 1, 0.0);
  } else {
    r.itl_s.insert(r.itl_s.end(), k, (at_s - r.last_token_s) / k);
  }
  r.output_tokens += k;
  ++r.messages;
  r.last_token_s = at_s;
  r.message_s.push_back(at_s);
}

std::vector<double> StallGaps(const std::vector<RequestResult>& results) {
  // Prefill spans [sent, first token], sorted by start, with the latest end
  // among those starting at or before each.
  std::vector<std::pair<double, double>> spans;
  for (const RequestResult& r : results) {
    if (r.ttft_s >= 0) spans.emplace_back(r.sent_s, r.sent_s + r.ttft_s);
  }
  std::sort(spans.begin(), spans.end());
  std::vector<double> starts(spans.size()), latest_end(spans.size());
  for (size_t i = 0; i < spans.size(); ++i) {
    starts[i] = spans[i].first;
    latest_end[i] = std::max(spans[i].second, i > 0 ? latest_end[i - 1] : spans[i].second);
  }
  std::vector<double> gaps;
  for (const RequestResult& r : results) {
    for (size_t m = 1; m < r.message_s.size(); ++m) {
      const double a = r.sent_s + r.message_s[m - 1], b = r.sent_s + r.message_s[m];
      // A span starting before b and ending after a overlaps (a, b); the
      // request's own ended at its first token, at or before a.
      const size_t before_b = std::lower_bound(starts.begin(), starts.end(), b) - starts.begin();
      if (before_b > 0 && latest_end[before_b - 1] > a) gaps.push_back(b - a);
    }
  }
  return gaps;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(p / 100.0 * static_cast<double>(values.size()));
  const size_t index = static_cast<size_t>(
      std::clamp(rank - 1, 0.0, static_cast<double>(values.size() - 1)));
  return values[index];
}

LoadSummary Summarize(const LoadShape& shape, const std::vector<RequestResult>& results,
                      double wall_s) {
  LoadSummary s;
  s.shape = shape;
  s.wall_s = wall_s;
  std::vector<double> ttft;
  std::vector<double> itl;
  std::vector<double> second;
  int64_t messages = 0;
  for (const RequestResult& r : results) {
    if (r.code == absl::StatusCode::kOk) {
      ++s.ok;
    } else {
      ++s.errors[absl::StatusCodeToString(r.code)];
    }
    if (r.ttft_s >= 0) ttft.push_back(r.ttft_s);
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
    if (!r.itl_s.empty()) second.push_back(r.itl_s.front());
    s.output_tokens += r.output_tokens;
    messages += r.messages;
    s.prompt_tokens += r.prompt_tokens;
    s.cached_prompt_tokens += r.cached_prompt_tokens;
  }
  s.output_tokens_per_s = wall_s > 0 ? static_cast<double>(s.output_tokens) / wall_s : 0;
  s.tokens_per_message =
      messages > 0 ? static_cast<double>(s.output_tokens) / static_cast<double>(messages) : 0;
  s.ttft_p50_s = Percentile(ttft, 50);
  s.ttft_p99_s = Percentile(ttft, 99);
  s.itl_p50_s = Percentile(itl, 50);
  s.itl_p99_s = Percentile(itl, 99);
  s.second_token_p50_s = Percentile(second, 50);
  s.second_token_p99_s = Percentile(second, 99);
  const std::vector<double> stalls = StallGaps(results);
  s.stalls = static_cast<int64_t>(stalls.size());
  s.stall_p50_s = Percentile(stalls, 50);
  s.stall_p99_s = Percentile(stalls, 99);
  s.stall_max_s = Percentile(stalls, 100);
  return s;
}

std::string FormatTable(const LoadSummary& s) {
  const LoadShape& sh = s.shape;
  std::string errors;
  for (const auto& [code, n] : s.errors) absl::StrAppend(&errors, errors.empty() ? "" : ", ",
                                                          code, "=", n);
  if (errors.empty()) errors = "none";
  std::string out = absl::StrFormat(
      "tandem-load %s: %d requests, concurrency %d, prompt %d tokens (%d shared in %d "
      "groups), max_tokens %d\n",
      sh.addr, sh.requests, sh.concurrency, sh.prompt_tokens, sh.shared_prefix_tokens,
      sh.prefix_groups, sh.max_tokens);
  if (!sh.http_addr.empty()) {
    absl::StrAppend(&out, "  through the HTTP front ", sh.http_addr, " (POST /v1/completions)\n");
  }
  if (sh.turns > 1) {
    absl::StrAppend(&out, absl::StrFormat("  multi-turn: %d turns per conversation, %d new "
                                          "tokens per later turn\n",
                                          sh.turns, sh.turn_tokens));
  }
  absl::StrAppend(&out, absl::StrFormat("  %-22s %12s %12s\n", "", "p50", "p99"));
  absl::StrAppend(&out, absl::StrFormat("  %-22s %9.2f ms %9.2f ms\n", "TTFT",
                                        s.ttft_p50_s * 1e3, s.ttft_p99_s * 1e3));
  absl::StrAppend(&out, absl::StrFormat("  %-22s %9.2f ms %9.2f ms\n", "inter-token latency",
                                        s.itl_p50_s * 1e3, s.itl_p99_s * 1e3));
  absl::StrAppend(&out, absl::StrFormat("  %-22s %9.2f ms %9.2f ms\n", "first -> second token",
                                        s.second_token_p50_s * 1e3, s.second_token_p99_s * 1e3));
  absl::StrAppend(&out, absl::StrFormat("  %-22s %9.2f ms %9.2f ms  (max %.2f ms, %d gaps)\n",
                                        "stall in others' prefill", s.stall_p50_s * 1e3,
                                        s.stall_p99_s * 1e3, s.stall_max_s * 1e3, s.stalls));
  absl::StrAppend(&out, absl::StrFormat("  %-22s %12.1f  (%d tokens in %.2f s)\n",
                                        "output tokens/s", s.output_tokens_per_s,
                                        s.output_tokens, s.wall_s));
  absl::StrAppend(&out, absl::StrFormat("  %-22s %12.2f\n", "tokens per message",
                                        s.tokens_per_message));
  absl::StrAppend(&out, absl::StrFormat("  %-22s %d of %d prompt tokens\n",
                                        "cached prompt tokens", s.cached_prompt_tokens,
                                        s.prompt_tokens));
  absl::StrAppend(&out, absl::StrFormat("  %-22s %d ok; errors: %s\n", "requests", s.ok,
                                        errors));
  return out;
}

std::string FormatJson(const LoadSummary& s) {
  const LoadShape& sh = s.shape;
  std::string errors = "{";
  for (const auto& [code, n] : s.errors) {
    absl::StrAppend(&errors, errors.size() > 1 ? ", " : "", JsonQuote(code), ": ", n);
  }
  errors += "}";
  return absl::StrCat(
      "{\"bench\": \"load\", \"addr\": ", JsonQuote(sh.addr),
      ", \"front\": ", JsonQuote(sh.http_addr.empty() ? "grpc" : "http"),
      ", \"model\": ", JsonQuote(sh.model), ", \"concurrency\": ", sh.concurrency,
      ", \"requests\": ", sh.requests, ", \"prompt_tokens\": ", sh.prompt_tokens,
      ", \"shared_prefix_tokens\": ", sh.shared_prefix_tokens,
      ", \"prefix_groups\": ", sh.prefix_groups, ", \"turns\": ", sh.turns,
      ", \"turn_tokens\": ", sh.turn_tokens, ", \"max_tokens\": ", sh.max_tokens,
      ", \"seed\": ", sh.seed,
      ", \"prefix_seed\": ", sh.prefix_seed == 0 ? sh.seed : sh.prefix_seed, ", \"ok\": ", s.ok,
      ", \"errors\": ", errors, ", \"wall_s\": ", JsonNumber(s.wall_s),
      ", \"output_tokens\": ", s.output_tokens,
      ", \"output_tokens_per_s\": ", JsonNumber(s.output_tokens_per_s),
      ", \"tokens_per_message\": ", JsonNumber(s.tokens_per_message),
      ", \"ttft_p50_s\": ", JsonNumber(s.ttft_p50_s),
      ", \"ttft_p99_s\": ", JsonNumber(s.ttft_p99_s), ", \"itl_p50_s\": ", JsonNumber(s.itl_p50_s),
      ", \"itl_p99_s\": ", JsonNumber(s.itl_p99_s),
      ", \"second_token_p50_s\": ", JsonNumber(s.second_token_p50_s),
      ", \"second_token_p99_s\": ", JsonNumber(s.second_token_p99_s), ", \"stalls\": ", s.stalls,
      ", \"stall_p50_s\": ", JsonNumber(s.stall_p50_s),
      ", \"stall_p99_s\": ", JsonNumber(s.stall_p99_s),
      ", \"stall_max_s\": ", JsonNumber(s.stall_max_s),
      ", \"prompt_tokens_total\": ", s.prompt_tokens,
      ", \"cached_prompt_tokens\": ", s.cached_prompt_tokens, "}");
}

}  // namespace tandem::bench
