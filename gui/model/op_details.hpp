// The fields of the Details panel for one op on one recorded rank, as (name, value) rows, plus
// its dependencies and dependants for the panel's jump links.
#pragma once

#include <QString>

#include <vector>

#include "model/timeline_store.hpp"

namespace stratsim::gui {

struct DetailField {
  QString name, value;
};

struct OpDetails {
  QString title;  // the op's name
  std::vector<DetailField> fields;
  std::vector<OpRef> dependencies, dependants;
};

OpDetails opDetails(const TimelineStore& store, OpRef op);

}  // namespace stratsim::gui
