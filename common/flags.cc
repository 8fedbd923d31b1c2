#include "common/flags.h"

#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tandem::common {

absl::StatusOr<Args> Args::Parse(const std::vector<std::string>& argv,
                                 const std::vector<FlagSpec>& specs) {
  Args args;
  absl::flat_hash_map<std::string, const FlagSpec*> by_name;
  for (const FlagSpec& s : specs) {
    by_name[s.name] = &s;
    args.values_[s.name] = s.default_value;
  }
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "--help" || a == "-h") {
      args.help_ = true;
      continue;
    }
    if (a.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", a, "\""));
    }
    std::string name = a.substr(2);
    std::string value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    if (it->second->is_bool) {
      if (!has_value) value = "true";
      if (value != "true" && value != "false") {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, ": expected true or false, got \"", value, "\""));
      }
    } else if (!has_value) {
      if (i + 1 >= argv.size()) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, ": missing value"));
      }
      value = argv[++i];
    }
    args.values_[name] = value;
    args.set_[name] = true;
  }
  if (!args.help_) {
    for (const FlagSpec& s : specs) {
      if (s.required && !args.set_.contains(s.name)) {
        return absl::InvalidArgumentError(absl::StrCat("--", s.name, " is required"));
      }
    }
  }
  return args;
}

std::string Args::Usage(const std::string& command, const std::vector<FlagSpec>& specs) {
  std::string out = absl::StrCat("usage: tandem ", command, " [flags]\n");
  for (const FlagSpec& s : specs) {
    absl::StrAppend(&out, "  --", s.name, s.is_bool ? "" : " VALUE", "  ", s.help);
    if (s.required) {
      absl::StrAppend(&out, " (required)");
    } else if (!s.default_value.empty()) {
      absl::StrAppend(&out, " (default ", s.default_value, ")");
    }
    out += "\n";
  }
  return out;
}

const std::string& Args::String(const std::string& name) const { return values_.at(name); }

absl::StatusOr<int64_t> Args::Int(const std::string& name) const {
  int64_t v;
  if (!absl::SimpleAtoi(values_.at(name), &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, ": \"", values_.at(name), "\" is not an integer"));
  }
  return v;
}

absl::StatusOr<int32_t> Args::IntInRange(const std::string& name, int32_t lo,
                                         int32_t hi) const {
  absl::StatusOr<int64_t> v = Int(name);
  if (!v.ok()) return v.status();
  if (*v < lo || *v > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, ": ", *v, " is out of range [", lo, ", ", hi, "]"));
  }
  return static_cast<int32_t>(*v);
}

absl::StatusOr<uint64_t> Args::Uint64(const std::string& name) const {
  uint64_t v;
  if (!absl::SimpleAtoi(values_.at(name), &v)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", name, ": \"", values_.at(name), "\" is not a non-negative integer"));
  }
  return v;
}

absl::StatusOr<double> Args::Double(const std::string& name) const {
  double v;
  if (!absl::SimpleAtod(values_.at(name), &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, ": \"", values_.at(name), "\" is not a number"));
  }
  return v;
}

bool Args::Bool(const std::string& name) const { return values_.at(name) == "true"; }

std::optional<Args> ParseFlagsOrExit(const std::string& name, int argc, char** argv,
                                          const std::vector<common::FlagSpec>& specs,
                                          int* exit_code) {
  absl::StatusOr<Args> args =
      Args::Parse(std::vector<std::string>(argv + 1, argv + argc), specs);
  if (!args.ok() || args->help()) {
    if (!args.ok()) std::cerr << name << ": " << args.status().message() << "\n";
    std::cerr << Args::Usage(name, specs);
    *exit_code = args.ok() ? 0 : 2;
    return std::nullopt;
  }
  return std::move(*args);
}

}  // namespace tandem::common
