// stratsim calibrate: measures this host (exec/calibration.hpp) and writes a platform file that
// `stratsim simulate --platform FILE` takes.
//
// The launcher side measures the compute in this process, then for each process count starts
// that many copies of this command as sweep workers (exec/launcher.hpp: supervised, reaped, never
// hanging), reads the measured run rank 0 wrote, fits the network and writes the file. A worker
// (RANK and WORLD_SIZE set by the launcher) runs the sweep program through the executor over
// Gloo, exactly as `stratsim run --compute gemm` runs a plan's program.
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "stratsim/cli/command.hpp"
#include "stratsim/core/errors.hpp"
#include "stratsim/core/json_reader.hpp"
#include "stratsim/core/nccl_tests.hpp"
#include "stratsim/exec/backend.hpp"
#include "stratsim/exec/calibration.hpp"
#include "stratsim/exec/executor.hpp"
#include "stratsim/exec/gpu_calibration.hpp"
#include "stratsim/exec/launcher.hpp"

namespace stratsim::cli {
namespace {

using core::InputError;

struct CalibrateArgs {
  std::string output = "calibrated.yaml";
  std::vector<int> procs;  // default: 2 and 4 (2 with --quick)
  bool quick = false;
  bool quiet = false;
  bool gpu = false;  // measure a CUDA GPU with cuBLAS instead of the host and Gloo
  int device = 0;
  double timeout = 60;
  // Worker mode (internal: set by the launcher side on the commands it starts).
  std::string worker_output;
  std::vector<double> sizes;
  int repeats = 5;
  std::vector<std::int64_t> gemm_axis;
  double interference_flops = 1e9;
  std::vector<std::string> nccl_tests;  // KIND=FILE: nccl-tests results to write as measured curves
};

// "calibrating [#####     ] 40% GEMM 26/64" on stderr, at most five times a second.
class Progress {
 public:
  explicit Progress(bool enabled) : enabled_(enabled && ::isatty(STDERR_FILENO)) {}
  void show(double fraction, const std::string& what) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (fraction < 1 && now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    const int width = 30, filled = static_cast<int>(width * std::min(1.0, fraction));
    std::cerr << fmt::format("\rcalibrating [{}{}] {:3}% {:<40}", std::string(filled, '#'),
                             std::string(width - filled, ' '), static_cast<int>(100 * fraction), what)
              << std::flush;
  }
  void done() {
    if (enabled_) std::cerr << "\n" << std::flush;
  }

 private:
  bool enabled_;
  std::chrono::steady_clock::time_point last_{};
};

std::string env_text(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

std::vector<std::string> own_executable() {
  char exe[PATH_MAX] = {};
  const ssize_t length = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (length <= 0) throw InputError("cannot read this process's executable from /proc");
  return {std::string(exe, static_cast<std::size_t>(length))};
}

exec::SweepSpec sweep_spec(int procs, const std::vector<double>& sizes, int repeats, double interference_flops,
                           const std::vector<std::int64_t>& gemm_axis) {
  exec::SweepSpec spec;
  spec.gemm_axis = gemm_axis;
  spec.procs = procs;
  spec.sizes = sizes;
  spec.repeats = repeats;
  spec.interference_flops = interference_flops;
  return spec;
}

// One rank of the sweep: run it, post the record; rank 0 gathers and writes the measured run.
int run_worker(const CalibrateArgs& args, int rank, int world_size) {
  const exec::SweepSpec spec =
      sweep_spec(world_size, args.sizes, args.repeats, args.interference_flops, args.gemm_axis);
  const core::Program program = exec::sweep_program(spec);
  const exec::Rendezvous rendezvous = exec::parse_rendezvous(env_text("STRATSIM_RDZV"), env_text("STRATSIM_RUN_ID"));
  exec::BackendOptions backend_options;
  backend_options.timeout = std::chrono::milliseconds(static_cast<long long>(args.timeout * 1000));
  exec::ExecOptions options;
  options.compute = exec::ComputeMode::gemm;
  options.on_error = [](const std::string& message) {
    std::cerr << ("stratsim calibrate: " + message + "\n") << std::flush;
    std::_Exit(1);
  };
  try {
    auto backend = exec::make_gloo_backend(rendezvous, rank, world_size, backend_options);
    const exec::RankRecord record = exec::execute(program, *backend, options);
    backend->publish(fmt::format("record/{}", rank), exec::encode(record));
    if (rank != 0) return 0;
    std::vector<exec::RankRecord> records;
    for (int r = 0; r < world_size; ++r)
      records.push_back(exec::decode_record(backend->fetch(fmt::format("record/{}", r))));
    const core::RunResult result = exec::assemble(program, records, backend->name(), "calibration sweep");
    write_atomically(args.worker_output, core::run_result_to_json(result, &program).dump());
    return 0;
  } catch (const exec::CommError& error) {
    std::cerr << ("stratsim calibrate: " + std::string(error.what()) + "\n") << std::flush;
    std::_Exit(1);
  }
}

std::string number_list(const std::vector<double>& values) {
  std::string out;
  for (double v : values) out += (out.empty() ? "" : ",") + fmt::format("{:.17g}", v);
  return out;
}

// Runs the sweep on `procs` processes and reads back what rank 0 measured.
exec::SweepResult sweep(const CalibrateArgs& args, const exec::SweepSpec& spec, const std::filesystem::path& scratch) {
  const int procs = spec.procs;
  const std::string result_file = (scratch / fmt::format("sweep-{}.json", procs)).string();
  exec::LaunchOptions launch;
  launch.nproc = procs;
  launch.timeout = std::chrono::milliseconds(static_cast<long long>(args.timeout * 1000));
  launch.command = own_executable();
  for (const std::string& arg :
       {std::string("calibrate"), std::string("--worker-output"), result_file, std::string("--sizes"),
        number_list(spec.sizes), std::string("--repeats"), std::to_string(spec.repeats),
        std::string("--interference-flops"), fmt::format("{:.17g}", spec.interference_flops), std::string("--timeout"),
        fmt::format("{:g}", args.timeout)})
    launch.command.push_back(arg);
  if (!spec.gemm_axis.empty()) {
    launch.command.push_back("--gemm-axis");
    launch.command.push_back(fmt::format("{}", fmt::join(spec.gemm_axis, ",")));
  }
  const int status = exec::launch(launch);
  if (status != 0)
    throw std::runtime_error(fmt::format("the Gloo sweep on {} processes failed (exit {})", procs, status));
  const core::Program program = exec::sweep_program(spec);
  const nlohmann::json document = core::load_document(result_file);
  return exec::read_sweep(spec, program, core::run_result_from_json(core::JsonReader(document, result_file), &program));
}

std::string today() {
  const std::time_t now = std::time(nullptr);
  char text[32] = {};
  std::strftime(text, sizeof text, "%Y-%m-%d", std::gmtime(&now));
  return text;
}

std::string host_name() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host[0] ? host : "this host";
}

// The output is checked before the minutes of measuring, not after.
void check_output_directory(const std::string& path) {
  const std::filesystem::path output(path);
  if (output.has_parent_path() && !std::filesystem::is_directory(output.parent_path()))
    throw InputError(fmt::format("-o {}: no such directory", path));
}

int run_calibration(const CalibrateArgs& args) {
  std::vector<int> procs = args.procs;
  if (procs.empty()) procs = args.quick ? std::vector<int>{2} : std::vector<int>{2, 4};
  for (int p : procs)
    if (p < 2 || (p & (p - 1)) != 0)
      throw InputError(fmt::format("--procs {}: expected a power of two from 2 (Gloo's halving-doubling)", p));
  // Ascending and once each: the platform's busy GEMM grids are listed by process count.
  std::sort(procs.begin(), procs.end());
  procs.erase(std::unique(procs.begin(), procs.end()), procs.end());
  const std::vector<std::int64_t> axis =
      args.quick ? std::vector<std::int64_t>{64, 256, 512} : std::vector<std::int64_t>{32, 128, 512, 2048};
  const std::vector<double> sizes = args.quick
                                        ? std::vector<double>{65536, 1 << 20, 8 << 20}
                                        : std::vector<double>{16384, 262144, 1 << 20, 4 << 20, 16 << 20, 64 << 20};
  const int repeats = args.quick ? 8 : 12;
  check_output_directory(args.output);

  Progress progress(!args.quiet);
  const double sweeps = static_cast<double>(procs.size());
  exec::Calibration calibration;
  calibration.procs = procs;
  calibration.host_name = host_name();
  calibration.date = today();
  calibration.command = args.quick ? "stratsim calibrate --quick" : "stratsim calibrate";
  calibration.host = exec::measure_host(axis, args.quick ? 0.005 : 0.03, [&](int done, int total) {
    progress.show(0.5 * done / total, fmt::format("GEMM {}/{}", done, total));
  });
  // Interference ops of about 20 ms at the measured rate, so they overlap several all-reduces.
  const double interference_flops = 0.02 * calibration.host.gemm_flops_per_second;
  char scratch_template[] = "/tmp/stratsim-calibrate-XXXXXX";
  if (!::mkdtemp(scratch_template)) throw std::runtime_error("cannot create a scratch directory in /tmp");
  const std::filesystem::path scratch(scratch_template);
  struct Cleanup {
    std::filesystem::path path;
    ~Cleanup() {
      if (std::getenv("STRATSIM_CALIBRATE_KEEP")) return;  // debugging: keep the measured sweeps
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } cleanup{scratch};
  // The GEMM grid again with every process computing, in each sweep whose processes have a core
  // each (more would time-slice, which the simulator models on its own): ranks that compute at
  // once share the memory system and clocks, more of them more so.
  for (std::size_t i = 0; i < procs.size(); ++i) {
    progress.show(0.5 + 0.5 * static_cast<double>(i) / sweeps, fmt::format("Gloo on {} processes", procs[i]));
    const bool grid = procs[i] <= calibration.host.cores;
    const exec::SweepResult result =
        sweep(args, sweep_spec(procs[i], sizes, repeats, interference_flops, grid ? axis : std::vector<std::int64_t>{}),
              scratch);
    calibration.sweep.samples.insert(calibration.sweep.samples.end(), result.samples.begin(), result.samples.end());
    if (grid) calibration.busy.push_back({procs[i], result.busy_gemms});
    if (i == 0) {
      calibration.sweep.compute_slowdown = result.compute_slowdown;
      calibration.sweep.communication_slowdown = result.communication_slowdown;
      calibration.sweep.shared_memory_bytes_per_second = result.shared_memory_bytes_per_second;
      calibration.sweep.compute_ops_beside = result.compute_ops_beside;
      calibration.sweep.comm_ops_beside = result.comm_ops_beside;
      if (result.compute_ops_beside == 0 || result.comm_ops_beside == 0)
        std::cerr << "stratsim calibrate: warning: no op ran wholly beside the other kind; the interference factors "
                     "average every op and understate the slowdown\n";
    }
  }
  progress.show(1.0, "fitting");
  progress.done();
  calibration.network = exec::fit_network(calibration.sweep.samples, calibration.host.cores);
  write_atomically(args.output, exec::platform_yaml(calibration));
  const exec::KindFit& all_reduce = calibration.network.kinds.at(core::CollectiveKind::all_reduce);
  std::cout << fmt::format(
      "stratsim calibrate: wrote {} ({} cores, {:.1f} GFLOP/s GEMM, {:.1f} GB/s memory; Gloo all-reduce {:.2f} GB/s "
      "per process, {:.1f} us per step, {:.1f} us per call; the network fit is within {:.1f} % on average)\n",
      args.output, calibration.host.cores, calibration.host.gemm_flops_per_second / 1e9,
      calibration.host.memory_bytes_per_second / 1e9, 1e-9 / all_reduce.beta, all_reduce.alpha * 1e6,
      all_reduce.overhead * 1e6, 100 * calibration.network.mean_abs_error);
  return 0;
}

// The GPU: cuBLAS GEMM rates by shape, copy bandwidth and the kernel floor (gpu_calibration.hpp).
int run_gpu_calibration(const CalibrateArgs& args) {
  if (!args.procs.empty()) throw InputError("--procs: Gloo process counts; calibrate --gpu measures one GPU");
  check_output_directory(args.output);
  exec::GemmGrid grid;
  if (args.quick) grid.step = 4, grid.largest = 16384, grid.min_seconds_per_shape = 0.001;
  Progress progress(!args.quiet);
  exec::GpuCalibration calibration;
  calibration.host_name = host_name();
  calibration.date = today();
  calibration.command = args.quick ? "stratsim calibrate --gpu --quick" : "stratsim calibrate --gpu";
  calibration.gpu = exec::measure_gpu(args.device, grid, [&](int done, int total) {
    progress.show(static_cast<double>(done) / total, fmt::format("cuBLAS GEMM {}/{}", done, total));
  });
  progress.done();
  write_atomically(args.output, exec::gpu_platform_yaml(calibration));
  const exec::GpuMeasurement& gpu = calibration.gpu;
  const double best_bf16 = exec::best_rate(gpu, core::DType::bfloat16);
  std::cout << fmt::format(
      "stratsim calibrate: wrote {} ({}: bfloat16 GEMMs up to {:.0f} TFLOP/s on a {}^3 grid, copies {:.0f} GB/s of "
      "{:.0f} GB/s peak, kernel floor {:.2f} us)\n",
      args.output, gpu.name, best_bf16 / 1e12, gpu.axis.size(), gpu.copy_bytes_per_second / 1e9,
      gpu.peak_memory_bytes_per_second / 1e9, gpu.kernel_floor_seconds * 1e6);
  return 0;
}

// One --nccl-tests KIND=FILE: the kind's measured times on the group shape the run had.
struct NcclTestsInput {
  core::CollectiveKind kind = core::CollectiveKind::all_reduce;
  std::string file;
  core::NcclTestsResult result;
};

NcclTestsInput read_nccl_tests_input(const std::string& argument) {
  const auto equals = argument.find('=');
  const std::optional<core::CollectiveKind> kind =
      equals == std::string::npos ? std::nullopt : core::find_collective_kind(argument.substr(0, equals));
  if (!kind || *kind == core::CollectiveKind::scatter)
    throw InputError(
        fmt::format("--nccl-tests {}: expected KIND=FILE, KIND one of all_reduce, all_gather, reduce_scatter, "
                    "broadcast, all_to_all",
                    argument));
  const std::string file = argument.substr(equals + 1);
  return {*kind, file, core::read_nccl_tests(file)};
}

// A cost model of measured curves (sim/cost_model.hpp, MeasuredCurve), one per kind and group shape.
std::string nccl_tests_cost_model(const std::vector<NcclTestsInput>& inputs) {
  std::map<core::CollectiveKind, std::vector<const NcclTestsInput*>> by_kind;
  for (const NcclTestsInput& input : inputs) {
    for (const NcclTestsInput* other : by_kind[input.kind])
      if (other->result.ranks == input.result.ranks && other->result.nodes == input.result.nodes)
        throw InputError(fmt::format("--nccl-tests: {} on {} ranks and {} node(s) is measured twice ({} and {})",
                                     core::collective_kind_name(input.kind), input.result.ranks, input.result.nodes,
                                     other->file, input.file));
    by_kind[input.kind].push_back(&input);
  }
  std::string out = fmt::format(
      "# Written by `stratsim calibrate --nccl-tests` ({}) from nccl-tests results: each kind's time by\n"
      "# size on the group shape it ran on (in-place times for all_reduce and broadcast, which stratsim's\n"
      "# programs run in place; out-of-place times for the rest). A collective of that kind on a group of\n"
      "# as many ranks over as many nodes takes the measured time, interpolated between sizes; other\n"
      "# shapes keep the preset's model. Apply it over a preset in a platform description, for\n"
      "# `simulate --platform DESCRIPTION`:\n"
      "#   preset: h100\n"
      "#   nodes: 2\n"
      "#   cost_model: THIS_FILE\n"
      "network:\n"
      "  per_kind:\n",
      today());
  for (const auto& [kind, runs] : by_kind) {
    out += fmt::format("    {}:\n      name: nccl-tests\n      measured:\n", core::collective_kind_name(kind));
    for (const NcclTestsInput* input : runs) {
      const core::NcclTestsResult& r = input->result;
      std::vector<std::string> bytes, us;
      for (const core::NcclTestsRow& row : r.rows) {
        bytes.push_back(fmt::format("{}", static_cast<std::int64_t>(row.bytes)));
        us.push_back(fmt::format("{:g}", core::runs_in_place(kind) ? row.in_place_us : row.out_of_place_us));
      }
      const std::string hosts = r.hosts.size() <= 3 ? fmt::format("{}", fmt::join(r.hosts, ", "))
                                                    : fmt::format("{}, {}, ...", r.hosts[0], r.hosts[1]);
      const std::string source = fmt::format("{}: {} ranks on {} node{} ({}), {}, {}", input->file, r.ranks, r.nodes,
                                             r.nodes > 1 ? "s" : "", hosts, r.device, r.dtype);
      out += fmt::format(
          "        - source: {}\n          ranks: {}\n          nodes: {}\n          bytes: [{}]\n          us: [{}]\n",
          nlohmann::json(source).dump(), r.ranks, r.nodes, fmt::join(bytes, ", "), fmt::join(us, ", "));
    }
  }
  return out;
}

int run_nccl_tests_import(const CalibrateArgs& args) {
  if (args.gpu || args.quick || !args.procs.empty())
    throw InputError("--nccl-tests reads measurements made elsewhere: it takes no --gpu, --quick or --procs");
  check_output_directory(args.output);
  std::vector<NcclTestsInput> inputs;
  for (const std::string& argument : args.nccl_tests) inputs.push_back(read_nccl_tests_input(argument));
  write_atomically(args.output, nccl_tests_cost_model(inputs));
  for (const NcclTestsInput& input : inputs) {
    const core::NcclTestsRow& largest = input.result.rows.back();
    std::cout << fmt::format("stratsim calibrate: {} from {}: {} sizes on {} ranks over {} node{}, {:g} us at {} B\n",
                             core::collective_kind_name(input.kind), input.file, input.result.rows.size(),
                             input.result.ranks, input.result.nodes, input.result.nodes > 1 ? "s" : "",
                             core::runs_in_place(input.kind) ? largest.in_place_us : largest.out_of_place_us,
                             static_cast<std::int64_t>(largest.bytes));
  }
  std::cout << fmt::format("stratsim calibrate: wrote {} (a cost model: `cost_model: {}` in a platform description)\n",
                           args.output, args.output);
  return 0;
}

int calibrate_command(const CalibrateArgs& args) {
  if (!args.worker_output.empty()) {
    const char* rank = std::getenv("RANK");
    const char* world = std::getenv("WORLD_SIZE");
    if (!rank || !world) throw InputError("--worker-output is internal: it runs under stratsim calibrate's launcher");
    return run_worker(args, std::atoi(rank), std::atoi(world));
  }
  if (!args.nccl_tests.empty()) return run_nccl_tests_import(args);
  return args.gpu ? run_gpu_calibration(args) : run_calibration(args);
}

const Register calibrate_registration("calibrate", [](CLI::App& app) {
  auto args = std::make_shared<CalibrateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "Measure this host (GEMM rate by shape, memory bandwidth, Gloo collectives over loopback) and write a platform "
      "file for `simulate --platform FILE`");
  cmd->add_option("-o,--output", args->output, "The platform file to write (YAML)")->capture_default_str();
  cmd->add_option("--procs", args->procs, "Process counts to measure Gloo on (powers of two; default 2 and 4)")
      ->delimiter(',');
  cmd->add_flag("--quick", args->quick, "A coarser grid and fewer sizes: under a minute");
  cmd->add_flag("--gpu", args->gpu,
                "Measure a CUDA GPU instead (cuBLAS GEMM rates by shape, copy bandwidth, kernel floor); needs a build "
                "with the CUDA toolkit");
  cmd->add_option("--device", args->device, "The CUDA GPU --gpu measures")
      ->check(CLI::Range(0, 1023))
      ->capture_default_str();
  cmd->add_option(
      "--nccl-tests", args->nccl_tests,
      "KIND=FILE (repeatable): instead of measuring this host, read nccl-tests output (all_reduce=FILE from "
      "all_reduce_perf, ...) measured on a cluster and write a cost model holding those times for that "
      "group shape");
  cmd->add_flag("--quiet", args->quiet, "No progress bar (drawn only when stderr is a terminal)");
  cmd->add_option("--timeout", args->timeout, "Seconds a rank waits for a peer before failing")
      ->check(CLI::Range(1.0, 3600.0))
      ->capture_default_str();
  // Internal: what the launcher side passes to its sweep workers.
  cmd->add_option("--worker-output", args->worker_output)->group("");
  cmd->add_option("--sizes", args->sizes)->delimiter(',')->group("");
  cmd->add_option("--repeats", args->repeats)->group("");
  cmd->add_option("--interference-flops", args->interference_flops)->group("");
  cmd->add_option("--gemm-axis", args->gemm_axis)->delimiter(',')->group("");
  return Subcommand{cmd, [args] { return calibrate_command(*args); }};
});

}  // namespace
}  // namespace stratsim::cli
