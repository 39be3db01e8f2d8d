// SimGrid XML platforms (`--platform FILE.xml`): the bytes as a platform file, simulated with a
// small DDP program. SimGrid parses the file inside the simulation process (simulator.cpp), so
// this checks what the user sees whatever SimGrid does with it: a result, or one InputError naming
// the file (a SimGrid parse error, too few hosts, a loader that crashed), never a crash of
// stratsim, an uncaught exception or a simulation process left running. (Coverage guidance sees
// the parent's side only: SimGrid runs in the forked process and is not instrumented.)
#include <unistd.h>

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <fstream>

#include <fmt/format.h>

#include "fuzz_support.hpp"
#include "stratsim/sim/platform.hpp"
#include "stratsim/sim/simulator.hpp"

namespace stratsim::fuzz {
namespace {

// One file per fuzzing process, rewritten per input and removed at exit.
struct ScratchFile {
  std::string path = fmt::format("/tmp/stratsim-fuzz-{}.xml", ::getpid());
  ~ScratchFile() { ::unlink(path.c_str()); }
};

// A cluster of a million hosts (`radical="0-999999"`) is a valid platform that SimGrid takes
// minutes to build: past the fuzzer's per-input timeout without being a fault. Inputs that name a
// number that large are skipped; the loader's edge cases are reached with small numbers too.
bool names_a_large_number(const std::string& text) {
  std::size_t digits = 0;
  for (const char c : text) {
    digits = std::isdigit(static_cast<unsigned char>(c)) ? digits + 1 : 0;
    if (digits > 4) return true;  // 10,000 or more
  }
  return false;
}

}  // namespace
}  // namespace stratsim::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace stratsim;
  if (fuzz::names_a_large_number(fuzz::text_of(data, size))) return 0;
  static const fuzz::ScratchFile scratch;
  {
    std::ofstream out(scratch.path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  fuzz::accepted(scratch.path, [&] { sim::simulate(fuzz::small_ddp_program(), sim::parse_platform(scratch.path)); });
  return 0;
}
