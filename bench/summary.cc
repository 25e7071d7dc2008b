// The summary of a benchmark run: ceilings first, then every figure against its ceiling and its
// counterpart.
#include "bench/summary.h"

#include <fmt/format.h>

#include <map>
#include <utility>

namespace deltacheck::bench {
namespace {

const Figure* find_containing(const std::vector<Figure>& figures, const std::string& prefix) {
  for (const Figure& f : figures)
    if (f.name.rfind(prefix, 0) == 0 && f.error.empty()) return &f;
  return nullptr;
}

const Figure* find_named(const std::vector<Figure>& figures, const std::string& name) {
  for (const Figure& f : figures)
    if (f.name == name && f.error.empty()) return &f;
  return nullptr;
}

// The counterpart of a figure: the same name with one path element swapped.
std::string swapped(const std::string& name, const std::string& from, const std::string& to) {
  const size_t at = name.find(from);
  if (at == std::string::npos) return "";
  return name.substr(0, at) + to + name.substr(at + from.size());
}

}  // namespace

std::string summarize(const std::vector<Figure>& figures) {
  const Figure* matmul = find_containing(figures, "ceiling/matmul_fp32");
  const Figure* copy = find_containing(figures, "ceiling/copy");
  const Figure* read = find_containing(figures, "ceiling/read");
  const Figure* fill = find_containing(figures, "ceiling/fill");
  std::string out = "summary: each figure against the ceilings measured in this run\n";
  if (matmul)
    out += fmt::format("  {:<52} {:8.1f} GFLOP/s  (fp32 matrix product, LibTorch/OpenBLAS)\n",
                       "ceiling: " + matmul->name, matmul->flops * 1e-9);
  else
    out += "  ceiling: no matrix product measured (filtered out, or a build without LibTorch)\n";
  if (copy)
    out += fmt::format("  {:<52} {:8.1f} GB/s     (large memory copy, read + write)\n",
                       "ceiling: " + copy->name, copy->bytes * 1e-9);
  else
    out += "  ceiling: no memory copy measured (filtered out)\n";
  if (read)
    out += fmt::format("  {:<52} {:8.1f} GB/s     (large read)\n", "ceiling: " + read->name,
                       read->bytes * 1e-9);
  if (fill)
    out += fmt::format("  {:<52} {:8.1f} GB/s     (large fill, memset)\n", "ceiling: " + fill->name,
                       fill->bytes * 1e-9);

  for (const Figure& f : figures) {
    if (f.name.rfind("ceiling/", 0) == 0) continue;
    if (!f.error.empty()) {
      out += fmt::format("  {:<52} error: {}\n", f.name, f.error);
      continue;
    }
    std::string line = fmt::format("  {:<52}", f.name);
    if (f.flops > 0) {
      line += fmt::format(" {:8.1f} GFLOP/s", f.flops * 1e-9);
      if (matmul) line += fmt::format(" = {:5.3f} of matmul", f.flops / matmul->flops);
    } else if (f.bytes > 0) {
      line += fmt::format(" {:8.1f} GB/s   ", f.bytes * 1e-9);
      if (copy) line += fmt::format(" = {:5.3f} of copy  ", f.bytes / copy->bytes);
    } else {
      line += fmt::format(" {:8.3f} ms     ", f.seconds * 1e3);
    }
    if (f.flops > 0 && f.bytes > 0 && copy)
      line += fmt::format(", state writes {:5.3f} of copy", f.bytes / copy->bytes);
    // Counterparts: the LibTorch kernel of the same shape, and the bare kernel under the harness.
    if (const Figure* t = find_named(figures, swapped(f.name, "/cpu/", "/torch/")))
      line += fmt::format(", {:.2f}x the speed of torch", t->seconds / f.seconds);
    if (const Figure* t = find_named(figures, swapped(f.name, "/cpu_chunked/", "/torch_autograd/")))
      line += fmt::format(", {:.2f}x the speed of torch autograd", t->seconds / f.seconds);
    // The external backend's routes (external_bench.cc): what each adds per call to the kernel.
    if (f.name.rfind("external_call/", 0) == 0) {
      const std::string kernel = f.name.find("/serve/") != std::string::npos
                                     ? swapped(f.name, "/serve/", "/kernel/")
                                     : swapped(f.name, "/cmd/", "/kernel/");
      if (const Figure* k = find_named(figures, kernel))
        line += fmt::format(", per-call overhead {:.2f} ms", (f.seconds - k->seconds) * 1e3);
      if (const Figure* c = find_named(figures, swapped(f.name, "/serve/", "/cmd/")))
        line += fmt::format(", {:.1f}x faster than one process per call", c->seconds / f.seconds);
    }
    if (const Figure* k = find_named(figures, swapped(f.name, "/run_case/", "/kernel/"))) {
      line += fmt::format(", harness overhead {:.1f}% of the kernel time",
                          100.0 * (f.seconds - k->seconds) / k->seconds);
      // Its floor: the poison written at the fill rate, the output and expectation read at the
      // read rate.
      if (read && fill && f.compare_bytes > 0)
        line += fmt::format(
            " (floor {:.1f}%: its memory traffic at the read and fill ceilings)",
            100.0 * (f.poison_bytes / fill->bytes + f.compare_bytes / read->bytes) / k->seconds);
    }
    out += line + "\n";
  }
  return out;
}

CollectingReporter::CollectingReporter(std::unique_ptr<benchmark::BenchmarkReporter> inner)
    : inner_(std::move(inner)) {}

bool CollectingReporter::ReportContext(const Context& context) {
  return inner_->ReportContext(context);
}

void CollectingReporter::ReportRuns(const std::vector<Run>& runs) {
  inner_->ReportRuns(runs);
  for (const Run& r : runs) {
    // With repetitions, keep the median; otherwise the one iteration run.
    if (r.run_type == Run::RT_Aggregate && r.aggregate_name != "median") continue;
    Figure f;
    f.name = r.run_name.str();
    if (r.error_occurred) f.error = r.error_message;
    const double iters = static_cast<double>(r.iterations);
    f.seconds = iters > 0 ? r.real_accumulated_time / iters : 0.0;  // aggregates: per iteration too
    auto counter = [&](const char* key) {
      auto it = r.counters.find(key);
      return it == r.counters.end() ? 0.0 : static_cast<double>(it->second.value);
    };
    f.flops = counter("FLOP/s");
    f.bytes = counter("bytes_per_second");
    f.items = counter("items_per_second");
    f.poison_bytes = counter("poison_bytes");
    f.compare_bytes = counter("compare_bytes");
    // Replace an earlier entry of the same name (the median after its repetitions).
    bool replaced = false;
    for (Figure& g : figures_)
      if (g.name == f.name) {
        g = f;
        replaced = true;
      }
    if (!replaced) figures_.push_back(std::move(f));
  }
}

void CollectingReporter::Finalize() { inner_->Finalize(); }

}  // namespace deltacheck::bench
