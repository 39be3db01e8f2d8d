// `stratsim-view --report`: the range statistics and the collective counts as text, read off the
// same item models the panels show, so the numbers cannot differ.
#pragma once

#include <QString>

#include <optional>
#include <utility>

#include "model/document_loader.hpp"

namespace stratsim::gui {

QString reportText(const LoadedDocument& document, std::optional<std::pair<double, double>> range);

// "START:END" with optional units per side ("1.5ms:3ms", "0.001:0.002" seconds); nullopt if malformed.
std::optional<std::pair<double, double>> parseRange(const QString& text);
// "1.5ms", "250us", "2 s", "0.001" (seconds) -> seconds; nullopt if malformed.
std::optional<double> parseTime(const QString& text);

}  // namespace stratsim::gui
