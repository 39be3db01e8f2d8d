// One table per enum for its names, both ways. The first entry for a value is its canonical name
// (what reports and JSON write); later entries for the same value are aliases accepted when
// parsing ("fp16" for float16, "allreduce_hook" for allreduce). Replaces hand-written switch pairs
// that had to be kept in step by hand.
//
//   constexpr EnumNames<Phase, 2> kPhases{{{Phase::forward, "forward"}, {Phase::backward, "backward"}}};
//   kPhases.name(Phase::forward);   // "forward"
//   kPhases.parse("backward");      // Phase::backward; std::nullopt for an unknown name
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace stratsim::core {

template <typename Enum, std::size_t N>
struct EnumNames {
  std::array<std::pair<Enum, std::string_view>, N> entries;

  constexpr std::string_view name(Enum value, std::string_view unknown = "?") const {
    for (const auto& [entry, text] : entries)
      if (entry == value) return text;
    return unknown;
  }

  constexpr std::optional<Enum> parse(std::string_view text) const {
    for (const auto& [entry, name] : entries)
      if (name == text) return entry;
    return std::nullopt;
  }

  // The canonical names, "a, b or c", for error messages.
  std::string expected() const {
    std::string out;
    std::size_t count = 0;
    for (std::size_t i = 0; i < N; ++i)
      if (name(entries[i].first) == entries[i].second) ++count;
    std::size_t written = 0;
    for (std::size_t i = 0; i < N; ++i) {
      if (name(entries[i].first) != entries[i].second) continue;  // an alias
      if (written > 0) out += written + 1 == count ? " or " : ", ";
      out += entries[i].second;
      ++written;
    }
    return out;
  }
};

}  // namespace stratsim::core
