#include "engine/constrain/grammar.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "engine/constrain/gbnf_parser.h"
#include "engine/constrain/utf8_ranges.h"

namespace tandem::engine::constrain {
namespace {

using gbnf::kUnbounded;
using gbnf::Node;
using gbnf::ParsedRule;
using gbnf::Ranges;

using Alt = std::vector<Element>;

}  // namespace

// Lowers parsed rules to byte elements and checks the result.
class GrammarLowering {
 public:
  GrammarLowering(const CompileLimits& limits) : limits_(limits) {}

  absl::StatusOr<Grammar> Lower(const std::vector<ParsedRule>& parsed) {
    for (const ParsedRule& r : parsed) {
      if (index_.contains(r.name)) {
        return absl::InvalidArgumentError(
            absl::StrCat(r.line, ":", r.column, ": rule '", r.name, "' is defined twice"));
      }
      index_[r.name] = NewRule(r.name);
    }
    auto root = index_.find("root");
    if (root == index_.end()) return absl::InvalidArgumentError("the grammar has no 'root' rule");
    for (const ParsedRule& r : parsed) {
      absl::StatusOr<std::vector<Alt>> alts = LowerAlternatives(r.body, r.name);
      if (!alts.ok()) return alts.status();
      rules_[index_[r.name]] = *std::move(alts);
    }
    RETURN_IF_ERROR(CheckAndPrune(root->second));
    return Flatten(root->second);
  }

 private:

  int32_t NewRule(std::string name) {
    rules_.emplace_back();
    names_.push_back(std::move(name));
    return static_cast<int32_t>(rules_.size()) - 1;
  }

  int32_t ByteSetIndex(const ByteSet& set) {
    auto [it, inserted] = set_index_.try_emplace(set.bits, static_cast<int32_t>(sets_.size()));
    if (inserted) sets_.push_back(set);
    return it->second;
  }

  absl::Status Count(int64_t n) {
    elements_ += n;
    if (elements_ > limits_.max_elements) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the grammar expands to more than ", limits_.max_elements, " elements"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<Alt>> LowerAlternatives(const Node& alt, const std::string& owner) {
    std::vector<Alt> out;
    for (const Node& seq : alt.children) {
      Alt elems;
      RETURN_IF_ERROR(LowerInto(seq, owner, elems));
      out.push_back(std::move(elems));
    }
    return out;
  }

  // Appends the elements that match `node` to `out`.
  absl::Status LowerInto(const Node& node, const std::string& owner, Alt& out) {
    switch (node.kind) {
      case Node::Kind::kSeq:
        for (const Node& child : node.children) RETURN_IF_ERROR(LowerInto(child, owner, out));
        return absl::OkStatus();
      case Node::Kind::kLiteral:
        RETURN_IF_ERROR(Count(static_cast<int64_t>(node.bytes.size())));
        for (char c : node.bytes) {
          ByteSet set;
          set.Add(static_cast<uint8_t>(c));
          out.push_back({Element::Kind::kBytes, ByteSetIndex(set)});
        }
        return absl::OkStatus();
      case Node::Kind::kClass: {
        absl::StatusOr<Element> e = ClassElement(node.ranges);
        if (!e.ok()) return e.status();
        out.push_back(*e);
        return Count(1);
      }
      case Node::Kind::kRef: {
        auto it = index_.find(node.name);
        if (it == index_.end()) {
          return absl::InvalidArgumentError(absl::StrCat(node.line, ":", node.column,
                                                         ": undefined rule '", node.name, "'"));
        }
        out.push_back({Element::Kind::kRule, it->second});
        return Count(1);
      }
      case Node::Kind::kAlt: {
        if (node.children.size() == 1) return LowerInto(node.children[0], owner, out);
        const int32_t rule = NewRule(absl::StrCat(owner, "-", rules_.size()));
        absl::StatusOr<std::vector<Alt>> alts = LowerAlternatives(node, owner);
        if (!alts.ok()) return alts.status();
        rules_[rule] = *std::move(alts);
        out.push_back({Element::Kind::kRule, rule});
        return Count(1);
      }
      case Node::Kind::kRepeat:
        return LowerRepeat(node, owner, out);
    }
    return absl::OkStatus();
  }

  // x{min,max}: min copies of x, then a chain of optional ones (or x* as
  // S ::= x S | "", right-recursive so the matcher's stacks stay flat).
  absl::Status LowerRepeat(const Node& node, const std::string& owner, Alt& out) {
    Alt unit;
    RETURN_IF_ERROR(LowerInto(node.children[0], owner, unit));
    if (unit.size() != 1) {
      // Make x one element, so copies cost one element each.
      const int32_t rule = NewRule(absl::StrCat(owner, "-", rules_.size()));
      rules_[rule] = {unit};
      unit = {{Element::Kind::kRule, rule}};
    }
    RETURN_IF_ERROR(Count(node.min));
    for (int32_t i = 0; i < node.min; ++i) out.push_back(unit[0]);
    if (node.max == kUnbounded) {
      const int32_t star = NewRule(absl::StrCat(owner, "-", rules_.size()));
      rules_[star] = {{unit[0], {Element::Kind::kRule, star}}, {}};
      out.push_back({Element::Kind::kRule, star});
      return Count(3);
    }
    int32_t tail = -1;
    for (int32_t i = node.min; i < node.max; ++i) {
      const int32_t opt = NewRule(absl::StrCat(owner, "-", rules_.size()));
      Alt take = {unit[0]};
      if (tail >= 0) take.push_back({Element::Kind::kRule, tail});
      rules_[opt] = {std::move(take), {}};
      tail = opt;
      RETURN_IF_ERROR(Count(3));
    }
    if (tail >= 0) out.push_back({Element::Kind::kRule, tail});
    return absl::OkStatus();
  }

  // A class of code points: one element when every member is one byte,
  // else a rule with one alternative per UTF-8 byte-range sequence.
  absl::StatusOr<Element> ClassElement(const Ranges& ranges) {
    auto cached = class_rule_.find(ranges);
    if (cached != class_rule_.end()) return cached->second;
    const std::vector<std::vector<ByteRange>> seqs = Utf8Sequences(ranges);
    Element e;
    if (std::all_of(seqs.begin(), seqs.end(), [](const auto& s) { return s.size() == 1; })) {
      ByteSet set;
      for (const auto& s : seqs) set.AddRange(s[0].lo, s[0].hi);
      e = {Element::Kind::kBytes, ByteSetIndex(set)};
    } else {
      const int32_t rule = NewRule(absl::StrCat("class-", rules_.size()));
      // Single-byte members share one alternative.
      ByteSet ascii;
      for (const auto& s : seqs) {
        if (s.size() == 1) {
          ascii.AddRange(s[0].lo, s[0].hi);
          continue;
        }
        Alt alt;
        for (const ByteRange& r : s) {
          ByteSet set;
          set.AddRange(r.lo, r.hi);
          alt.push_back({Element::Kind::kBytes, ByteSetIndex(set)});
        }
        RETURN_IF_ERROR(Count(static_cast<int64_t>(alt.size())));
        rules_[rule].push_back(std::move(alt));
      }
      if (!ascii.empty()) rules_[rule].push_back({{Element::Kind::kBytes, ByteSetIndex(ascii)}});
      e = {Element::Kind::kRule, rule};
    }
    class_rule_[ranges] = e;
    return e;
  }

  bool ElementEmpty(const Element& e) const {
    return e.kind == Element::Kind::kBytes && sets_[e.value].empty();
  }

  // The least fixpoint "rule r has an alternative whose every element
  // holds", where a byte element holds when `bytes_hold` says so and a rule
  // element holds once its rule does. A worklist over the rules that reference each rule, so a chain of
  // n rules costs O(n), not O(n^2) passes.
  template <typename Holds>
  std::vector<bool> Fixpoint(Holds bytes_hold) const {
    const size_t n = rules_.size();
    std::vector<bool> holds(n, false);
    // pending[a]: rule elements of alternative a not yet known to hold.
    std::vector<int32_t> pending;
    std::vector<int32_t> owner;
    std::vector<std::vector<int32_t>> users(n);  // rule -> alternatives using it
    std::vector<int32_t> queue;
    for (size_t r = 0; r < n; ++r) {
      for (const Alt& alt : rules_[r]) {
        const auto a = static_cast<int32_t>(pending.size());
        int32_t count = 0;
        bool blocked = false;
        for (const Element& e : alt) {
          if (e.kind == Element::Kind::kRule) {
            ++count;
            users[e.value].push_back(a);
          } else if (!bytes_hold(e)) {
            blocked = true;
          }
        }
        pending.push_back(blocked ? -1 : count);
        owner.push_back(static_cast<int32_t>(r));
        if (!blocked && count == 0 && !holds[r]) {
          holds[r] = true;
          queue.push_back(static_cast<int32_t>(r));
        }
      }
    }
    while (!queue.empty()) {
      const int32_t r = queue.back();
      queue.pop_back();
      for (int32_t a : users[r]) {
        if (pending[a] <= 0 || --pending[a] > 0) continue;
        if (!holds[owner[a]]) {
          holds[owner[a]] = true;
          queue.push_back(owner[a]);
        }
      }
    }
    return holds;
  }

  // Prunes alternatives that can never finish (they reference a rule that
  // derives no finite string, or a class with no member), then refuses
  // left recursion and a root that matches nothing.
  absl::Status CheckAndPrune(int32_t root) {
    const size_t n = rules_.size();
    // An alternative derives a string once every element does (a byte set
    // with a member, or a productive rule).
    const std::vector<bool> productive =
        Fixpoint([&](const Element& e) { return !ElementEmpty(e); });
    if (!productive[root]) {
      return absl::InvalidArgumentError("the grammar matches nothing: 'root' derives no string");
    }
    for (size_t r = 0; r < n; ++r) {
      std::erase_if(rules_[r], [&](const Alt& alt) {
        return std::any_of(alt.begin(), alt.end(), [&](const Element& e) {
          return e.kind == Element::Kind::kRule ? !productive[e.value] : ElementEmpty(e);
        });
      });
    }
    // Nullable rules (an alternative derives "" once every element is a
    // nullable rule), then the "can start with" graph; a cycle is left
    // recursion.
    const std::vector<bool> nullable = Fixpoint([](const Element&) { return false; });
    std::vector<std::vector<int32_t>> starts(n);
    for (size_t r = 0; r < n; ++r) {
      for (const Alt& alt : rules_[r]) {
        for (const Element& e : alt) {
          if (e.kind != Element::Kind::kRule) break;
          starts[r].push_back(e.value);
          if (!nullable[e.value]) break;
        }
      }
    }
    // Iterative DFS with colors: 0 new, 1 on the path, 2 done.
    std::vector<uint8_t> color(n, 0);
    for (size_t s = 0; s < n; ++s) {
      if (color[s] != 0) continue;
      std::vector<std::pair<int32_t, size_t>> stack = {{static_cast<int32_t>(s), 0}};
      color[s] = 1;
      while (!stack.empty()) {
        auto& [r, next] = stack.back();
        if (next == starts[r].size()) {
          color[r] = 2;
          stack.pop_back();
          continue;
        }
        const int32_t to = starts[r][next++];
        if (color[to] == 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              "rule '", VisibleName(to), "' is left-recursive (it can start with itself)"));
        }
        if (color[to] == 0) {
          color[to] = 1;
          stack.push_back({to, 0});
        }
      }
    }
    return absl::OkStatus();
  }

  // Helper rules are named after the rule they were written in.
  std::string VisibleName(int32_t rule) const {
    const std::string& name = names_[rule];
    const size_t dash = name.rfind('-');
    if (dash != std::string::npos && !index_.contains(name)) return name.substr(0, dash);
    return name;
  }

  Grammar Flatten(int32_t root) {
    Grammar g;
    g.byte_sets_ = std::move(sets_);
    g.names_ = std::move(names_);
    g.root_ = root;
    g.rules_.resize(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r) {
      for (const Alt& alt : rules_[r]) {
        g.rules_[r].push_back(static_cast<int32_t>(g.elements_.size()));
        g.elements_.insert(g.elements_.end(), alt.begin(), alt.end());
        g.elements_.push_back({Element::Kind::kEnd, 0});
      }
    }
    return g;
  }

  const CompileLimits& limits_;
  absl::flat_hash_map<std::string, int32_t> index_;
  std::vector<std::vector<Alt>> rules_;
  std::vector<std::string> names_;
  std::vector<ByteSet> sets_;
  absl::flat_hash_map<std::array<uint64_t, 4>, int32_t> set_index_;
  std::map<Ranges, Element> class_rule_;
  int64_t elements_ = 0;
};

absl::StatusOr<Grammar> Grammar::Parse(std::string_view text, const CompileLimits& limits) {
  if (static_cast<int64_t>(text.size()) > limits.max_text_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the grammar is longer than ", limits.max_text_bytes, " bytes"));
  }
  absl::StatusOr<std::vector<ParsedRule>> parsed = gbnf::Parse(text, limits);
  if (!parsed.ok()) return parsed.status();
  return GrammarLowering(limits).Lower(*parsed);
}

}  // namespace tandem::engine::constrain
