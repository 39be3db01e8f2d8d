// Every document stratsim writes and reads back (core/include/stratsim/core/document.hpp):
// timelines v1 and v2, run reports (`simulate --json`, `run --json`, what `stratsim compare`
// reads) and programs (`plan --emit-program`), from text. What reads is analysed, reported,
// exported as a Chrome trace, compared with itself and written back.
#include <cstddef>
#include <cstdint>

#include "document_use.hpp"
#include "stratsim/core/json_reader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace stratsim;
  const std::string text = fuzz::text_of(data, size);
  nlohmann::json document;
  if (!fuzz::accepted("fuzz.json", [&] { document = core::parse_document(text, "fuzz.json", false); })) return 0;
  fuzz::read_and_use(document, "fuzz.json");
  return 0;
}
