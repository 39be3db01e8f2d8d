// nccl-tests output (core/include/stratsim/core/nccl_tests.hpp), as `calibrate --nccl-tests` reads
// it: what reads has a group shape and increasing sizes with positive times.
#include <cstddef>
#include <cstdint>

#include "fuzz_support.hpp"
#include "stratsim/core/nccl_tests.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace stratsim;
  core::NcclTestsResult result;
  if (!fuzz::accepted("fuzz.txt", [&] { result = core::parse_nccl_tests(fuzz::text_of(data, size), "fuzz.txt"); }))
    return 0;
  fuzz::require(result.ranks >= 1 && result.nodes >= 1 && result.nodes <= result.ranks, "a shape out of range");
  fuzz::require(result.rows.size() >= 2, "fewer than two sizes");
  for (std::size_t i = 0; i < result.rows.size(); ++i) {
    const core::NcclTestsRow& row = result.rows[i];
    fuzz::require(row.bytes > 0 && row.out_of_place_us > 0 && row.in_place_us > 0, "a size or time not positive");
    fuzz::require(i == 0 || row.bytes > result.rows[i - 1].bytes, "sizes not increasing");
  }
  return 0;
}
