// Reading and writing the golden fixture format over the typed HDF5 datasets of hdf5.h. Files are
// written without object timestamps and with creation-order indexes, so the same cases give the
// same bytes and are read back in the order they were written.
#include "golden/format.h"

#include <fcntl.h>
#include <hdf5.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>

#include "cases/fork_guard.h"
#include "cases/generate.h"
#include "cases/generator_version.h"
#include "cases/input_checks.h"
#include "cases/safe_file.h"
#include "cases/safe_text.h"
#include "golden/hdf5.h"
#include "golden/sha256.h"

namespace deltacheck::golden {
namespace {

using cases::DType;
using cases::Tensor;

Status invalid(const std::string& m) { return Status::InvalidArgument(m); }

std::optional<DType> parse_dtype(const std::string& s) {
  for (DType t :
       {DType::kF32, DType::kBF16, DType::kF16, DType::kF64, DType::kI32, DType::kI64, DType::kU8})
    if (s == cases::dtype_name(t)) return t;
  return std::nullopt;
}

std::string shape_str(const std::vector<int64_t>& s) { return cases::shape_string(s); }

// What a reader may still allocate for the case being read (--max-memory); negative: no limit.
struct Budget {
  int64_t limit = -1, left = -1;
  Status take(const std::string& where, int64_t bytes) {
    if (limit < 0) return Status::Ok();
    if (bytes > left)
      return invalid(where + ": reading it would exceed the memory limit of " +
                     size_text(static_cast<double>(limit)) + " (--max-memory; " +
                     size_text(static_cast<double>(limit - left + bytes)) + " needed so far)");
    left -= bytes;
    return Status::Ok();
  }
};

// HDF5's chunk cache per open dataset (H5Pset_chunk_cache's default): memory while reading.
constexpr uint64_t kChunkCacheBytes = uint64_t{1} << 20;

// What a stored dataset must be (dtype, shape), checked before it is read; the error when not.
using SpecCheck = std::function<Status(cases::DType dtype, const std::vector<int64_t>& shape)>;

// Reads a dataset written by write_dataset() into a tensor, checking dtype and checksum.
StatusOr<Tensor> read_checked_dataset(hid_t group, const std::string& name,
                                      const std::string& where, DatasetInfo* info, Budget* budget,
                                      const SpecCheck& check_spec) {
  if (Status st = require_hard_link(group, name, where); !st.ok()) return st;
  Hid d = dataset_h(H5Dopen2(group, name.c_str(), H5P_DEFAULT));
  if (!d.ok()) return invalid(where + ": not a readable dataset" + hdf5_detail());
  StatusOr<std::string> dtype_name = read_attr_string(d.get(), where, "dtype");
  if (!dtype_name.ok()) return dtype_name.status();
  const std::optional<DType> dtype = parse_dtype(dtype_name.value());
  if (!dtype) return invalid(where + ": unknown dtype '" + dtype_name.value() + "'");
  Hid type = type_h(H5Dget_type(d.get()));
  if (!matches_storage(type.get(), *dtype))
    return invalid(where + ": stored as " + describe_type(type.get()) + ", which does not hold " +
                   dtype_name.value());
  StatusOr<std::vector<int64_t>> shape = dataset_shape(d.get(), where, storage_of(*dtype).size);
  if (!shape.ok()) return shape.status();
  StatusOr<std::string> sha = read_attr_string(d.get(), where, "sha256");
  if (!sha.ok()) return sha.status();
  int64_t bytes = cases::dtype_size(*dtype);
  for (int64_t x : shape.value()) bytes *= x;  // below 2^40: dataset_shape() refuses more
  if (Status st = budget->take(where, bytes); !st.ok()) return st;
  // Name, dtype and shape against the case before anything is allocated or read: a file that
  // claims 2 GiB for a 1 kB input is refused in microseconds.
  if (check_spec)
    if (Status st = check_spec(*dtype, shape.value()); !st.ok()) return st;
  uint64_t chunk = 0;
  // A chunk larger than the data and 64 MiB is never needed; smaller ones count against the limit.
  const uint64_t max_chunk = std::max<uint64_t>(static_cast<uint64_t>(bytes), uint64_t{64} << 20);
  if (Status st = check_storage(d.get(), where, storage_of(*dtype).size, max_chunk, &chunk);
      !st.ok())
    return st;
  if (chunk > 0)
    if (Status st = budget->take(where + " (one chunk and the chunk cache)",
                                 static_cast<int64_t>(chunk + kChunkCacheBytes));
        !st.ok())
      return st;
  Tensor t(name, *dtype, shape.value());
  if (t.nbytes() > 0) {
    // Contiguous data must be all there: a truncated or unwritten dataset is an error, not zeros.
    Hid dcpl = plist_h(H5Dget_create_plist(d.get()));
    if (dcpl.ok() && H5Pget_layout(dcpl.get()) == H5D_CONTIGUOUS &&
        H5Dget_storage_size(d.get()) != t.nbytes())
      return invalid(where + ": data missing or truncated");
    if (H5Dread(d.get(), storage_of(*dtype).mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data()) < 0)
      return invalid(where + ": " + read_failure(d.get()));
  }
  const std::string actual = sha256_hex(t.data(), t.nbytes());
  if (actual != sha.value())
    return invalid(where + ": checksum mismatch (sha256 attribute " + sha.value().substr(0, 16) +
                   "..., data " + actual.substr(0, 16) + "...)");
  if (info) *info = {"", name, dtype_name.value(), shape.value(), actual};
  return t;
}

Hid file_access_plist() {
  Hid fapl = plist_h(H5Pcreate(H5P_FILE_ACCESS));
  // Object headers and the superblock carry checksums from format 1.8 on: a flipped byte in
  // the file's metadata is then an error instead of a wrong value.
  H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_LATEST);
  return fapl;
}

}  // namespace

// --- case ids as group names ----------------------------------------------------------------

std::string escape_case_id(const std::string& id) {
  std::string out;
  for (char ch : id) {
    if (ch == '%')
      out += "%25";
    else if (ch == '/')
      out += "%2F";
    else
      out += ch;
  }
  return out;
}

std::string unescape_case_id(const std::string& name) {
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] == '%' && name.compare(i, 3, "%25") == 0) {
      out += '%';
      i += 2;
    } else if (name[i] == '%' && name.compare(i, 3, "%2F") == 0) {
      out += '/';
      i += 2;
    } else {
      out += name[i];
    }
  }
  return out;
}

// --- writer ---------------------------------------------------------------------------------

struct FixtureWriter::Impl {
  std::string path, temp;  // the destination and the temporary file, as paths for messages
  cases::SafeDir dir;      // the destination's folder, opened once: everything below is by name
  std::string name, temp_name;
  Hid file;
  bool committed = false;
  cases::UniqueFd fd;  // the temporary file as made, locked while this writer lives

  ~Impl() {
    if (!committed && !temp_name.empty()) {
      file.reset();
      (void)dir.remove(temp_name);  // the name: whatever stands there now, never followed
    }
  }
};

namespace {

// Temporary files "<prefix>XXXXXX" in `dir` whose writer died (their lock is free).
void remove_dead_temporaries(const cases::SafeDir& dir, const std::string& prefix) {
  std::vector<std::string> dead;
  for (const std::string& name : dir.names()) {
    if (name.size() != prefix.size() + 6 || name.compare(0, prefix.size(), prefix) != 0) continue;
    const int fd =
        ::openat(dir.fd(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) continue;
    struct stat st;
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::flock(fd, LOCK_EX | LOCK_NB) == 0)
      dead.push_back(name);
    ::close(fd);
  }
  for (const std::string& n : dead) (void)dir.remove(n);
}

}  // namespace

FixtureWriter::FixtureWriter() : impl_(std::make_unique<Impl>()) {}
FixtureWriter::~FixtureWriter() {
  const cases::NoForkSection no_fork;
  impl_.reset();
}
const std::string& FixtureWriter::temp_path() const { return impl_->temp; }

Status FixtureWriter::open(const std::string& path, const FileInfo& info) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base.empty()) return invalid("not a file name");
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return invalid("folder " + dir + " does not exist");
  // The folder the user named, opened once (links in its path followed: the user named it).
  StatusOr<cases::SafeDir> d = cases::SafeDir::open(dir, false);
  if (!d.ok()) return invalid(d.status().message());
  if (!impl_->temp_name.empty()) return Status::Internal("fixture writer already open");
  impl_->path = path;  // as the user wrote it, for messages
  return open(d.value(), base, info);
}

Status FixtureWriter::open(const cases::SafeDir& dir, const std::string& name,
                           const FileInfo& info) {
  const cases::NoForkSection no_fork;  // HDF5 holds a library-wide lock
  quiet_hdf5();
  if (!impl_->temp_name.empty()) return Status::Internal("fixture writer already open");
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    return invalid("not a file name");
  impl_->dir = dir;
  impl_->name = name;
  if (impl_->path.empty()) impl_->path = dir.path_of(name);
  // The destination is replaced by rename: only a regular file (or nothing) may be there, never
  // a FIFO, a device or a symbolic link (the link would be replaced, not its target).
  struct stat st;
  if (::fstatat(dir.fd(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode))
    return invalid(std::string("is ") +
                   (S_ISLNK(st.st_mode)    ? "a symbolic link"
                    : S_ISFIFO(st.st_mode) ? "a FIFO"
                    : S_ISDIR(st.st_mode)  ? "a folder"
                                           : "not a regular file") +
                   ": deltacheck writes fixtures to a new or a regular file only");
  remove_dead_temporaries(dir, "." + name + ".tmp-");
  // A hidden temporary file in the destination's folder, so the final rename() is atomic. Made
  // with O_EXCL | O_NOFOLLOW relative to the folder's descriptor (nothing planted at a name is
  // opened), and written only through that descriptor: HDF5 opens /proc/self/fd/N, the file
  // itself, so a candidate that can write the folder (a --serve worker's case folder holds {in})
  // and swaps the name for a link between the creation and the write has the link ignored, never
  // its target truncated.
  StatusOr<cases::UniqueFd> fd = dir.make_temp("." + name + ".tmp-", &impl_->temp_name);
  if (!fd.ok()) return invalid("cannot create a temporary file: " + fd.status().message());
  impl_->fd = fd.take();
  impl_->temp = impl_->path.substr(0, impl_->path.size() - name.size()) + impl_->temp_name;
  // The file is private (0600) until here; the fixture gets the mode a plain create would.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(impl_->fd.get(), 0666 & ~mask);
  // Held until the file is renamed or removed: a temporary file whose lock is free belongs to a
  // writer that died, and the next writer of that destination removes it.
  ::flock(impl_->fd.get(), LOCK_EX | LOCK_NB);
  Hid fcpl = plist_h(H5Pcreate(H5P_FILE_CREATE));
  H5Pset_obj_track_times(fcpl.get(), false);
  H5Pset_link_creation_order(fcpl.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
  Hid fapl = file_access_plist();
  // HDF5's own flock on the file would conflict with ours (flock locks are per open file).
  H5Pset_file_locking(fapl.get(), false, true);
  const std::string held = "/proc/self/fd/" + std::to_string(impl_->fd.get());
  impl_->file = file_h(H5Fcreate(held.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get()));
  if (!impl_->file.ok()) return invalid("cannot create an HDF5 file" + hdf5_detail());
  const hid_t f = impl_->file.get();
  for (Status st : {write_attr_string(f, "format", kFormatName),
                    write_attr_int(f, "format_version", info.format_version),
                    write_attr_int(f, "generator_version", info.generator_version),
                    write_attr_string(f, "tolerance_policy", info.tolerance_policy),
                    write_attr_string(f, "producer", info.producer)})
    if (!st.ok()) return st;
  return Status::Ok();
}

Status FixtureWriter::add(const FixtureCase& fc) {
  const cases::NoForkSection no_fork;  // HDF5 holds a library-wide lock
  quiet_hdf5();
  if (!impl_->file.ok()) return Status::Internal("fixture writer not open");
  const std::string id = fc.c.id(), name = escape_case_id(id);
  if (H5Lexists(impl_->file.get(), name.c_str(), H5P_DEFAULT) > 0)
    return invalid("case '" + id + "' written twice");
  StatusOr<Hid> g = create_group(impl_->file.get(), name);
  if (!g.ok()) return g.status();
  const hid_t gid = g.value().get();
  for (Status st : {write_attr_string(gid, "case_id", id), write_attr_string(gid, "op", fc.c.op()),
                    write_attr_int(gid, "seed", static_cast<int64_t>(fc.c.seed())),
                    write_attr_int(gid, "format_version", kFormatVersion),
                    write_attr_int(gid, "generator_version", fc.generator_version),
                    write_attr_string(gid, "tolerance_policy", fc.tolerance_policy)})
    if (!st.ok()) return st;

  // The parameters again, one string attribute each, so a reader needs no case-id parser.
  StatusOr<Hid> params = create_group(gid, "params");
  if (!params.ok()) return params.status();
  for (const auto& [k, v] : fc.c.params())
    if (Status st = write_attr_string(params.value().get(), k.c_str(), v); !st.ok()) return st;

  // The list of inputs, so that a dataset removed from the file is noticed.
  std::vector<std::string> input_names;
  for (const Tensor& t : fc.inputs.all()) input_names.push_back(t.name());
  if (Status st = write_attr_strings(gid, "input_names", input_names); !st.ok()) return st;
  StatusOr<Hid> inputs = create_group(gid, "inputs");
  if (!inputs.ok()) return inputs.status();
  for (const Tensor& t : fc.inputs.all())
    if (Status st = write_dataset(inputs.value().get(), t.name(), t.dtype(), t.shape(), t.data(),
                                  t.nbytes(), true, true);
        !st.ok())
      return st;

  StatusOr<Hid> outputs = create_group(gid, "outputs");
  if (!outputs.ok()) return outputs.status();
  for (const ops::OutputSpec& s : fc.outputs) {
    StatusOr<Hid> o = create_group(outputs.value().get(), s.name);
    if (!o.ok()) return o.status();
    if (Status st = write_attr_string(o.value().get(), "dtype", cases::dtype_name(s.dtype));
        !st.ok())
      return st;
    if (Status st = write_attr_ints(o.value().get(), "shape", s.shape, false); !st.ok()) return st;
  }

  if (!fc.expected.empty()) {
    StatusOr<Hid> expected = create_group(gid, "expected");
    if (!expected.ok()) return expected.status();
    for (const ops::OutputSpec& s : fc.outputs) {
      auto it = fc.expected.find(s.name);
      int64_t numel = 1;
      for (int64_t d : s.shape) numel *= d;
      if (it == fc.expected.end() || static_cast<int64_t>(it->second.size()) != numel)
        return Status::Internal("case '" + id + "': no expected values of the shape of '" + s.name +
                                "'");
      if (Status st =
              write_dataset(expected.value().get(), s.name, DType::kF64, s.shape, it->second.data(),
                            it->second.size() * sizeof(double), true, true);
          !st.ok())
        return st;
    }
    if (fc.expected.size() != fc.outputs.size())
      return Status::Internal("case '" + id + "': expected values for an unknown output");
  }
  return Status::Ok();
}

Status FixtureWriter::commit(bool durable) {
  const cases::NoForkSection no_fork;  // HDF5 holds a library-wide lock
  quiet_hdf5();
  if (!impl_->file.ok()) return Status::Internal("fixture writer not open");
  if (!impl_->file.reset()) return invalid("cannot finish writing" + hdf5_detail());
  // The data must be on disk before the name points at it (the file itself, through the
  // descriptor it was made with).
  if (durable && ::fsync(impl_->fd.get()) != 0)
    return invalid(std::string("cannot sync the temporary file: ") + std::strerror(errno));
  // Only the file this writer made takes the destination's name: a temporary name that now holds
  // something else (a link or file a candidate put there) is an error, not renamed into place.
  struct stat mine {
  }, there{};
  if (::fstat(impl_->fd.get(), &mine) != 0 ||
      ::fstatat(impl_->dir.fd(), impl_->temp_name.c_str(), &there, AT_SYMLINK_NOFOLLOW) != 0 ||
      mine.st_dev != there.st_dev || mine.st_ino != there.st_ino)
    return invalid("the temporary file " + impl_->temp +
                   " was removed or replaced while it was written");
  // The check above and the rename are two steps: a candidate can still move the file away
  // between them (the rename finds nothing) or put its link under the temporary name (the rename
  // moves that link into place). So the name is checked again after the rename: only this
  // writer's file counts as written, and a link it moved there is taken away again.
  const Status renamed = impl_->dir.rename(impl_->temp_name, impl_->name);
  struct stat placed {};
  const bool ours =
      ::fstatat(impl_->dir.fd(), impl_->name.c_str(), &placed, AT_SYMLINK_NOFOLLOW) == 0 &&
      placed.st_dev == mine.st_dev && placed.st_ino == mine.st_ino;
  if (!ours) {
    if (renamed.ok() && S_ISLNK(placed.st_mode))
      ::unlinkat(impl_->dir.fd(), impl_->name.c_str(), 0);
    return invalid("the temporary file " + impl_->temp +
                   " was removed or replaced while it was written");
  }
  if (!renamed.ok())
    return invalid("cannot rename the temporary file into place: " + renamed.message());
  impl_->committed = true;
  impl_->temp.clear();
  impl_->temp_name.clear();
  impl_->fd = cases::UniqueFd();  // the file is in place: nothing to protect any more
  return Status::Ok();
}

// --- reader ---------------------------------------------------------------------------------

struct FixtureReader::Impl {
  std::string path;
  Hid file;
  FileInfo info;
  std::vector<std::string> groups;
  int64_t max_bytes = 0;
  bool check_inputs = true;
};

FixtureReader::FixtureReader() : impl_(std::make_unique<Impl>()) {}
FixtureReader::~FixtureReader() {
  const cases::NoForkSection no_fork;
  impl_.reset();
}
const FileInfo& FixtureReader::info() const { return impl_->info; }
void FixtureReader::set_max_bytes(int64_t bytes) { impl_->max_bytes = bytes; }
void FixtureReader::set_check_inputs(bool check) { impl_->check_inputs = check; }
const std::vector<std::string>& FixtureReader::case_groups() const { return impl_->groups; }

Status FixtureReader::open(const std::string& path) {
  const cases::NoForkSection no_fork;  // HDF5 holds a library-wide lock
  quiet_hdf5();
  impl_->path = path;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return invalid(std::string("cannot open: ") + strerror(errno));
  if (!S_ISREG(st.st_mode)) return invalid("not a regular file");
  Hid fapl = plist_h(H5Pcreate(H5P_FILE_ACCESS));
  impl_->file = file_h(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()));
  if (!impl_->file.ok())
    return invalid("not a readable HDF5 file (truncated or corrupted?)" + hdf5_detail());
  const hid_t f = impl_->file.get();
  StatusOr<std::string> format = read_attr_string(f, "file", "format");
  if (!format.ok() || format.value() != kFormatName)
    return invalid(std::string("not a deltacheck golden fixture (root attribute format != '") +
                   kFormatName + "')");
  StatusOr<int64_t> version = read_attr_int(f, "file", "format_version");
  if (!version.ok()) return version.status();
  if (version.value() != kFormatVersion)
    return invalid("unknown format version " + std::to_string(version.value()) +
                   " (this build reads version " + std::to_string(kFormatVersion) + ")");
  impl_->info.format_version = version.value();
  StatusOr<int64_t> gen = read_attr_int(f, "file", "generator_version");
  if (!gen.ok()) return gen.status();
  impl_->info.generator_version = gen.value();
  StatusOr<std::string> tol = read_attr_string(f, "file", "tolerance_policy");
  if (!tol.ok()) return tol.status();
  impl_->info.tolerance_policy = tol.value();
  if (StatusOr<std::string> p = read_attr_string(f, "file", "producer"); p.ok())
    impl_->info.producer = p.value();
  StatusOr<std::vector<std::string>> groups = list_links(f, "file");
  if (!groups.ok()) return groups.status();
  impl_->groups = groups.take();
  return Status::Ok();
}

StatusOr<FixtureCase> FixtureReader::read(size_t index) const {
  const cases::NoForkSection no_fork;  // HDF5 holds a library-wide lock
  quiet_hdf5();
  if (!impl_->file.ok()) return Status::Internal("fixture reader not open");
  if (index >= impl_->groups.size()) return Status::Internal("case index out of range");
  const std::string& name = impl_->groups[index];
  const std::string where = "case '" + unescape_case_id(name) + "'";
  StatusOr<Hid> g = open_group(impl_->file.get(), name, "file");
  if (!g.ok()) return g.status();
  const hid_t gid = g.value().get();

  StatusOr<std::string> id = read_attr_string(gid, where, "case_id");
  if (!id.ok()) return id.status();
  if (escape_case_id(id.value()) != name)
    return invalid(where + ": group name does not match its case_id attribute '" + id.value() +
                   "'");
  std::optional<cases::Case> c;
  try {
    c = cases::Case::parse(id.value());
  } catch (const std::exception& e) {
    return invalid(std::string("case id does not parse: ") + e.what());
  }
  StatusOr<std::string> op = read_attr_string(gid, where, "op");
  if (!op.ok()) return op.status();
  if (op.value() != c->op()) return invalid(where + ": attribute op '" + op.value() + "' differs");
  StatusOr<int64_t> seed = read_attr_int(gid, where, "seed");
  if (!seed.ok()) return seed.status();
  if (static_cast<uint64_t>(seed.value()) != c->seed())
    return invalid(where + ": attribute seed " + std::to_string(seed.value()) +
                   " differs from the id's seed");
  StatusOr<int64_t> version = read_attr_int(gid, where, "format_version");
  if (!version.ok()) return version.status();
  if (version.value() != kFormatVersion)
    return invalid(where + ": unknown format version " + std::to_string(version.value()));
  StatusOr<int64_t> gen = read_attr_int(gid, where, "generator_version");
  if (!gen.ok()) return gen.status();
  StatusOr<std::string> tol = read_attr_string(gid, where, "tolerance_policy");
  if (!tol.ok()) return tol.status();

  FixtureCase fc{*c, {}, {}, {}, gen.value(), tol.value(), {}};
  Budget budget;
  if (impl_->max_bytes > 0) budget.limit = budget.left = impl_->max_bytes;

  StatusOr<Hid> inputs = open_group(gid, "inputs", where);
  if (!inputs.ok()) return inputs.status();
  StatusOr<std::vector<std::string>> input_names = list_links(inputs.value().get(), where);
  if (!input_names.ok()) return input_names.status();
  StatusOr<std::vector<std::string>> listed = read_attr_strings(gid, where, "input_names");
  if (!listed.ok()) return listed.status();
  for (const std::string& n : listed.value())
    if (std::find(input_names.value().begin(), input_names.value().end(), n) ==
        input_names.value().end())
      return invalid(where + ": inputs/" + n + " missing");
  if (listed.value() != input_names.value()) {
    auto join = [](const std::vector<std::string>& v) {
      std::string out;
      for (const std::string& x : v)
        out += (out.empty() ? "" : ", ") + cases::printable_line(x, 60);
      return out;
    };
    return invalid(where + ": the inputs are stored in the order " + join(input_names.value()) +
                   ", the input_names attribute lists " + join(listed.value()) +
                   " (a fixture keeps the generator's order: regenerate it with deltacheck golden "
                   "generate)");
  }
  // The stored inputs must be the problem the id describes before anything reads them; checking
  // regenerates the case's inputs (their names, dtypes and shapes, checked before each dataset
  // is read, and the values fixed by the id).
  const bool check = impl_->check_inputs;
  cases::TensorMap want;
  try {
    if (Status st = budget.take(where + " (inputs regenerated to check them)",
                                check ? cases::estimate_input_bytes(*c) : 0);
        !st.ok())
      return st;
    if (check) want = cases::generate_inputs(*c);
  } catch (const std::exception& e) {
    return invalid(where + ": cannot regenerate its inputs to check them: " + e.what());
  }
  for (const std::string& n : input_names.value()) {
    DatasetInfo info;
    const auto spec = [&](DType dtype, const std::vector<int64_t>& shape) {
      return check ? cases::check_input_spec(want, n, dtype, shape) : Status::Ok();
    };
    StatusOr<Tensor> t =
        read_checked_dataset(inputs.value().get(), n, where + " inputs/" + n, &info, &budget, spec);
    if (!t.ok()) return t.status();
    info.role = "inputs";
    fc.datasets.push_back(std::move(info));
    fc.inputs.add(t.take());
  }
  try {
    if (Status st = check ? cases::check_case_inputs(*c, fc.inputs,
                                                     gen.value() == cases::kGeneratorVersion, &want)
                          : Status::Ok();
        !st.ok())
      return invalid(where + ": " + st.message());
  } catch (const std::exception& e) {
    return invalid(where + ": cannot check its inputs: " + e.what());
  }

  StatusOr<Hid> outputs = open_group(gid, "outputs", where);
  if (!outputs.ok()) return outputs.status();
  StatusOr<std::vector<std::string>> output_names = list_links(outputs.value().get(), where);
  if (!output_names.ok()) return output_names.status();
  for (const std::string& n : output_names.value()) {
    const std::string w = where + " outputs/" + n;
    StatusOr<Hid> o = open_group(outputs.value().get(), n, where);
    if (!o.ok()) return o.status();
    StatusOr<std::string> dt = read_attr_string(o.value().get(), w, "dtype");
    if (!dt.ok()) return dt.status();
    const std::optional<DType> dtype = parse_dtype(dt.value());
    if (!dtype) return invalid(w + ": unknown dtype '" + dt.value() + "'");
    StatusOr<std::vector<int64_t>> shape = read_attr_ints(o.value().get(), w, "shape");
    if (!shape.ok()) return shape.status();
    fc.outputs.push_back({n, *dtype, shape.value()});
  }
  if (fc.outputs.empty()) return invalid(where + ": no outputs");

  if (H5Lexists(gid, "expected", H5P_DEFAULT) > 0) {
    StatusOr<Hid> expected = open_group(gid, "expected", where);
    if (!expected.ok()) return expected.status();
    for (const ops::OutputSpec& s : fc.outputs) {
      const std::string w = where + " expected/" + s.name;
      if (H5Lexists(expected.value().get(), s.name.c_str(), H5P_DEFAULT) <= 0)
        return invalid(w + ": dataset missing");
      DatasetInfo info;
      const auto spec = [&](DType dtype, const std::vector<int64_t>& shape) {
        if (dtype != DType::kF64) return invalid(w + ": not fp64");
        if (shape != s.shape)
          return invalid(w + ": shape " + shape_str(shape) + " differs from output " +
                         shape_str(s.shape));
        return Status::Ok();
      };
      StatusOr<Tensor> t =
          read_checked_dataset(expected.value().get(), s.name, w, &info, &budget, spec);
      if (!t.ok()) return t.status();
      info.role = "expected";
      fc.datasets.push_back(std::move(info));
      const double* p = t.value().as<double>();
      fc.expected[s.name].assign(p, p + t.value().numel());
    }
  }
  return fc;
}

}  // namespace deltacheck::golden
