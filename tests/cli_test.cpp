// The qmvlab executable end to end: its error paths and a tiny real run of each
// subcommand. Exit codes: 0 ok, 1 a check failed, 2 bad usage or input.
#include <utility>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "harness/cli/options.h"
#include "harness/csv.h"
#include "kernels/availability.h"
#include "kernels/cpu_features.h"
#include "kernels/registry.h"
#include "tests/cli_run.h"
#include "tests/tiny_model.h"

namespace {

using qmv::testing::CliRun;
using qmv::testing::count_lines;
using qmv::testing::expect_error;
using qmv::testing::qmvlab;
using qmv::testing::tmp;

TEST(Cli, HelpForEverySubcommand) {
  for (const char* sub : {"", "list", "check", "bench", "peak", "report"}) {
    const CliRun r = qmvlab(std::string(sub) + " --help");
    EXPECT_EQ(r.code, 0) << sub << r.output;
    EXPECT_NE(r.output.find("Usage"), std::string::npos) << sub << r.output;
  }
}

TEST(Cli, NoSubcommandIsAnError) { EXPECT_EQ(qmvlab("").code, 2); }

TEST(Cli, UnknownKernelName) { expect_error("check --kernels q4_K.cpu.nonexistent", "unknown kernel 'q4_K.cpu.nonexistent'"); }
TEST(Cli, EmptySelection) { expect_error("bench --kernels 'q9_K.*'", "no kernel matches 'q9_K.*'"); }
TEST(Cli, MisspeltExclusionIsRefused) {
  expect_error("check --kernels 'q4_K.*,!q4_K.cpu.scalr_f32' --shapes 8x256", "'!q4_K.cpu.scalr_f32' excludes no kernel");
  expect_error("tune --model /nonexistent.gguf --kernels '!q9_K.*'", "'!q9_K.*' excludes no kernel");
}
TEST(Cli, RankAllSpeedsAndABenchCsvAreRefusedTogether) {
  // A bench CSV's figures have no read speeds to rank over: one line, exit 2.
  expect_error("plan --model /nonexistent.gguf --rank-all-speeds --bench-csv x.csv",
               "--bench-csv excludes --rank-all-speeds");
}
TEST(Cli, ExclusionTakesKernelsOut) {
  const CliRun r = qmvlab("list --kernels 'q4_K.cpu.scalar*,!q4_K.cpu.scalar_q8k'");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("q4_K.cpu.scalar_f32"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("q4_K.cpu.scalar_q8k"), std::string::npos) << r.output;
}
// A selection whose exclusions took out every kernel its patterns matched says so,
// naming the exclusions; one whose patterns matched nothing says that.
TEST(Cli, ExclusionsThatLeaveNoKernelAreNamed) {
  expect_error("list --kernels '!q4_0*,q4_0.cpu.scalar_f32'",
               "'q4_0.cpu.scalar_f32' matches q4_0.cpu.scalar_f32, and the exclusion '!q4_0*' removes it: "
               "no kernel is left");
  expect_error("bench --kernels 'q4_K.cpu.*,!q4_K*,!*avx*'", "and the exclusions '!q4_K*', '!*avx*' remove them all");
  expect_error("check --kernels '!*'", "the exclusion '!*' removes every kernel: none is left");
  expect_error("list --kernels 'q9_K.*,!q4_0*'", "no kernel matches 'q9_K.*,!q4_0*'");
}
// The parser's refusals are one short line naming the subcommand, the option and the
// value: CLI11's own range message spelt the largest double out (309 digits), and its
// unsigned options took -1 as 2^64 - 1.
TEST(Cli, ParserRefusalsAreOneShortLine) {
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {"check --threads 0", "qmvlab check: --threads: '0' is not positive"},
           {"check --threads -2", "--threads: '-2' is not positive"},
           {"decode --model x.gguf --prompt hi --top-k -1", "--top-k: '-1' is negative"},
           {"tune --model x.gguf --budget-nmse nan", "--budget-nmse: 'nan' is not a finite number"},
           {"check --seed -1", "--seed: '-1' is negative"},
           {"check --seed 99999999999999999999", "--seed: '99999999999999999999' is out of range"},
           {"make-model --preset toy --mix q4_0 --out x.gguf --seed -3", "--seed: '-3' is negative"},
           {"list --frobnicate", "qmvlab list: The following argument was not expected: --frobnicate"},
           {"frobnicate", "qmvlab: unknown subcommand 'frobnicate' (known: list, check,"},
           {"--frobnicate", "qmvlab: unknown option '--frobnicate'"},
       }) {
    const CliRun r = qmvlab(args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
    EXPECT_EQ(count_lines(r.output, "\n"), 1) << r.output;
    EXPECT_LT(r.output.size(), 300u) << r.output;
  }
}
// A results CSV saved with CRLF line ends reads as the same file with LF: report,
// compare and merge print the same and merge writes the same file.
TEST(Cli, CrlfResultsReadAsTheirLfCopies) {
  const std::string files = std::string(QMV_SOURCE_DIR) + "/tests/bad_input/files/";
  const std::string lf = tmp("crlf-test-lf"), crlf = tmp("crlf-test-crlf");
  for (const std::string& dir : {lf, crlf}) std::filesystem::create_directories(dir);
  for (const char* name : {"bench.csv", "check.csv", "peak.csv", "sweep_a.csv", "sweep_b.csv"}) {
    std::ifstream in(files + name);
    std::ofstream a(lf + "/" + name, std::ios::binary), b(crlf + "/" + name, std::ios::binary);
    std::string line;
    int lines = 0;
    for (; std::getline(in, line); ++lines) a << line << "\n", b << line << "\r\n";
    ASSERT_GE(lines, 2) << name;
  }
  // The output of a command on the files of `dir`, with the folder's name taken out.
  auto run = [](const std::string& dir, const std::string& args) {
    std::string command = args;
    for (std::size_t at = command.find("DIR"); at != std::string::npos; at = command.find("DIR", at))
      command.replace(at, 3, dir);
    CliRun r = qmvlab(command);
    for (std::size_t at = r.output.find(dir); at != std::string::npos; at = r.output.find(dir, at))
      r.output.replace(at, dir.size(), "DIR");
    return r;
  };
  for (const char* args : {"report DIR/bench.csv", "report DIR/check.csv", "report DIR/peak.csv",
                           "report DIR/sweep_a.csv", "compare DIR/bench.csv DIR/sweep_b.csv",
                           "merge DIR/merged.csv DIR/sweep_a.csv DIR/sweep_b.csv"}) {
    const CliRun want = run(lf, args), got = run(crlf, args);
    EXPECT_EQ(want.code, 0) << args << "\n" << want.output;
    EXPECT_EQ(got.code, want.code) << args << "\n" << got.output;
    EXPECT_EQ(got.output, want.output) << args;
  }
  auto text = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(text(crlf + "/merged.csv"), text(lf + "/merged.csv"));
}
TEST(Cli, UnsupportedShape) {
  expect_error("check --kernels 'q4_K.*' --shapes 3x100", "shape 3x100 is not supported by any selected kernel");
}
// Prompts must be UTF-8: the first bad byte is named by its offset; overlong forms,
// surrogates, code points past U+10FFFF and cut-short sequences are all refused.
TEST(Cli, Utf8IsCheckedWithTheByteOffset) {
  EXPECT_NO_THROW(qmv::check_utf8("h\xC3\xA9llo \xE6\x97\xA5 \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF", "t"));
  const std::pair<std::string, std::string> bad[] = {
      {"ab\xC3", "at byte 2 (0xC3)"},         {"\xC0\xAF", "at byte 0 (0xC0)"},
      {"x\xED\xA0\x80", "at byte 1 (0xED)"}, {"\xF4\x90\x80\x80", "at byte 0 (0xF4)"},
      {"a\x80", "at byte 1 (0x80)"},          {"ok\xFF", "at byte 2 (0xFF)"}};
  for (const auto& [text, where] : bad) {
    try {
      qmv::check_utf8(text, "--prompt");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), "--prompt: invalid UTF-8 " + where);
    }
  }
}

TEST(Cli, MalformedShape) { expect_error("check --shapes 4096by4096", "bad shape '4096by4096'"); }
// A shape whose byte counts would overflow (rows x cols x 4 wrapped to 0 bytes once) or
// that no machine could hold is refused by name, before anything is allocated.
TEST(Cli, HugeShapesAreRefusedBeforeAnyAllocation) {
  expect_error("check --kernels f32.cpu.scalar --shapes 4611686018427387904x4", "bad shape '4611686018427387904x4'");
  expect_error("check --kernels f32.cpu.scalar --shapes 16777217x256", "at most 16777216 rows");
  expect_error("bench --kernels f32.cpu.scalar --shapes 65536x65537", "4294967296 elements");
}
// Every floating-point option refuses NaN and the infinities, whatever its range check
// (NaN compares false with both bounds), and --threads is bounded.
TEST(Cli, NonFiniteNumbersAndAbsurdThreadCountsAreRefused) {
  for (const char* nan : {"nan", "NaN", "-nan"}) {
    expect_error(std::string("bench --kernels f32.cpu.scalar --min-time ") + nan, "is not a finite number");
    expect_error(std::string("accuracy --kernels f32.cpu.scalar --k ") + nan, "is not a finite number");
    expect_error(std::string("decode --model x.gguf --prompt hi --peak-gbps ") + nan, "is not a finite number");
    expect_error(std::string("tune --model x.gguf --min-time ") + nan, "is not a finite number");
  }
  // The infinities fail the range checks first, which name the option too.
  for (const char* inf : {"inf", "-inf"}) {
    expect_error(std::string("bench --kernels f32.cpu.scalar --min-time ") + inf, "--min-time: ");
    expect_error(std::string("decode --model x.gguf --prompt hi --peak-gbps ") + inf, "--peak-gbps: ");
  }
  expect_error("check --kernels f32.cpu.scalar --threads 10000000", "threads is more than");
  expect_error("decode --model x.gguf --prompt hi --threads 10000", "threads is more than");
}
TEST(Cli, UnknownPeakLoopIsRefusedBeforeAnythingRuns) {
  const std::string args = "bench --kernels q4_K.cpu.scalar_f32 --shapes 8x256 --peak-loops avx2.s3.pf7";
  expect_error(args, "--peak-loops: 'avx2.s3.pf7' is not a read loop");
  EXPECT_EQ(qmvlab(args).output.find("peak read bandwidth"), std::string::npos) << "the up-front peak ran first";
}
TEST(Cli, GpuWindowsAreRefusedBeforeAnythingIsMeasured) {
  expect_error("peak --device cpu --gpu-windows q4_K:16x256", "--gpu-windows measures the GPU");
  const std::string args = "peak --device cuda --gpu-windows q4_K:4096x4096,q9_K:16x256";
  expect_error(args, "'q9_K:16x256': 'q9_K' is not a weight type");
  EXPECT_EQ(qmvlab(args).output.find("GPU peak"), std::string::npos) << "a peak ran before the sizes were read";
}
TEST(Cli, HandoverRunsItsRoundsAndRefusesWhatItCannotDo) {
  // One round: two could read at two speeds (a busy machine) and make two groups.
  const CliRun r = qmvlab("peak --threads 2 --handover 1 --buffer-mib 8");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count_lines(r.output, "hand-over of 8 KiB"), 1) << r.output;
  EXPECT_EQ(count_lines(r.output, "2 threads, 1 round reading"), 1) << r.output;
  EXPECT_EQ(count_lines(r.output, "(medians)"), 1) << r.output;
  EXPECT_EQ(r.output.find("peak read bandwidth"), std::string::npos) << "the bandwidth search ran too";
  expect_error("peak --threads 1 --handover 2", "--handover needs a thread count of 2 or more");
  expect_error("peak --threads 2 --handover 2 --out " + tmp("handover.csv"), "--handover prints its rounds");
  EXPECT_FALSE(std::filesystem::exists(tmp("handover.csv")));
  expect_error("peak --threads 2 --handover 0", "--handover");
}
TEST(Cli, PeakBufferMustBeAtLeastOneMiB) { EXPECT_EQ(qmvlab("peak --device cpu --buffer-mib 0").code, 2); }
TEST(Cli, BadThreads) { expect_error("bench --kernels q4_K.cpu.scalar_f32 --threads 0", "bad thread count '0'"); }
TEST(Cli, UnknownOption) { EXPECT_EQ(qmvlab("check --frobnicate").code, 2); }
TEST(Cli, UnreadableReport) {
  expect_error("report " + tmp("nope.csv"), "nope.csv: no such file");
  // A directory, an empty file and a missing file each say what they are.
  const std::string dir = tmp("a-results-dir");
  std::filesystem::create_directories(dir);
  expect_error("report " + dir, dir + ": is a directory");
  expect_error("compare " + dir + " " + dir, dir + ": is a directory");
  expect_error("sweep " + dir, dir + ": is a directory");
  const std::string empty = tmp("empty.csv");
  std::ofstream{empty};
  expect_error("report " + empty, "empty.csv: empty file");
  expect_error("compare " + empty + " " + empty, "empty.csv: empty file");
  std::ofstream(tmp("other.csv")) << "a,b\n1,2\n";
  expect_error("report " + tmp("other.csv"), "not a qmvlab results CSV");
}
TEST(Cli, MalformedGgufIsOneClearLine) {
  const std::string corpus = std::string(QMV_SOURCE_DIR) + "/tests/gguf_corpus/";
  expect_error("gguf " + corpus + "bad_truncated_data.gguf", "bad_truncated_data.gguf: GGUF: tensor 'w.q8_0' data");
  expect_error("gguf " + corpus + "bad_magic.gguf", "not a GGUF file");
  expect_error("gguf " + tmp("missing.gguf"), "missing.gguf: cannot open");
  const CliRun ok = qmvlab("gguf --tensors " + corpus + "valid.gguf");
  EXPECT_EQ(ok.code, 0) << ok.output;
  EXPECT_NE(ok.output.find("w.q8_0"), std::string::npos) << ok.output;
}

TEST(Cli, PlanResolvesOrRefusesNamingTheOp) {
  const auto bytes = qmv::testing::tiny_model(qmv::testing::tiny_q4k_spec());
  const std::string model = tmp("tiny-q4k.gguf");
  std::ofstream(model, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                               static_cast<std::streamsize>(bytes.size()));
  const CliRun ok = qmvlab("plan --model " + model + " --rules ffn_down=q4_K.cpu.scalar_f32 --tune-time 0.002");
  ASSERT_EQ(ok.code, 0) << ok.output;
  const std::size_t row = ok.output.find("| ffn_down ");
  ASSERT_NE(row, std::string::npos) << ok.output;
  const std::string line = ok.output.substr(row, ok.output.find('\n', row) - row);
  for (const char* cell : {"| q4_K ", "| 256x512 ", "| 2 ", "| q4_K.cpu.scalar_f32 ", "| plan "})
    EXPECT_NE(line.find(cell), std::string::npos) << cell << " in " << line;
  expect_error("plan --model " + model + " --rules ffn_up=q6_K.cpu.scalar_f32",
               "ffn_up (q4_K 512x256) cannot use q6_K.cpu.scalar_f32: it reads q6_K weights");
  expect_error("plan --model " + model + " --rules ffn_sideways=auto", "'ffn_sideways' in rule 'ffn_sideways=auto' is neither an op");
  expect_error("plan --model " + model + " --rules attn.q4_K=auto", "unknown op 'attn'");
  expect_error("plan --model " + std::string(QMV_SOURCE_DIR) + "/tests/gguf_corpus/valid.gguf",
               "missing metadata key 'llama.embedding_length'");
}

TEST(Cli, UnwritableOutput) {
  expect_error("check --kernels q4_K.cpu.scalar_f32 --shapes 1x256 --out /proc/qmvlab/x.csv", "/proc/qmvlab/x.csv");
}

TEST(Cli, ListShowsEveryReferenceKernelAvailable) {
  const CliRun r = qmvlab("list");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* k : {"q4_K.cpu.scalar_f32 ", "q5_K.cpu.scalar_f32 ", "q6_K.cpu.scalar_f32 ", "q4_K.cpu.scalar_q8k",
                        "q5_K.cpu.scalar_q8k", "q6_K.cpu.scalar_q8k"})
    EXPECT_NE(r.output.find(k), std::string::npos) << k;
  EXPECT_EQ(r.output.find("test."), std::string::npos) << "test-only kernels leaked into qmvlab";
  EXPECT_EQ(qmvlab("list --shapes").code, 0);
}

TEST(Cli, AFormerKernelNameRunsTheKernelWithOneNote) {
  const CliRun r = qmvlab("check --kernels q4_K.cpu.scalar,q6_K.cpu.scalar --shapes 3x256");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("PASS q4_K.cpu.scalar_f32"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("PASS q6_K.cpu.scalar_f32"), std::string::npos) << r.output;
  const std::string note = "kernel 'q4_K.cpu.scalar' is now named 'q4_K.cpu.scalar_f32'";
  const auto at = r.output.find(note);
  ASSERT_NE(at, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(note, at + 1), std::string::npos) << "the note is printed once: " << r.output;
}

TEST(Cli, CheckWritesCsvThatReportReads) {
  const std::string out = tmp("check.csv");
  const CliRun r = qmvlab("check --kernels '*_K.cpu.scalar*,!*batch*' --shapes 3x256,67x512 --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("12 passed, 0 failed"), std::string::npos) << r.output;
  const auto rows = qmv::read_check_csv(out);
  EXPECT_EQ(rows.size(), 6u * 2 * 2);  // kernels x shapes x activation cases
  const CliRun rep = qmvlab("report " + out);
  EXPECT_EQ(rep.code, 0) << rep.output;
  EXPECT_NE(rep.output.find("q6_K.cpu.scalar_q8k"), std::string::npos);
}

TEST(Cli, ReportOfAPeakCsvShowsTheHugePageShare) {
  const std::string out = tmp("peak-pages.csv");
  const qmv::RunContext ctx{"m", "cpu", "none", "gcc", "abc", "qmvlab peak"};
  qmv::PeakRow paged{2, 1 << 30, 5, 38.5, 37.25};
  paged.read_loop = "avx2.s2.pf512";
  paged.huge_page_pct = 87.5;
  {
    qmv::CsvWriter w(out, qmv::peak_header(), false);
    w.write(qmv::peak_fields(ctx, paged));
    w.write(qmv::peak_fields(ctx, qmv::PeakRow{1, 1 << 30, 5, 19.5, 19.25}));  // pages unknown
  }
  const CliRun rep = qmvlab("report " + out);
  ASSERT_EQ(rep.code, 0) << rep.output;
  EXPECT_NE(rep.output.find("| huge pages"), std::string::npos) << rep.output;
  EXPECT_NE(rep.output.find("| avx2.s2.pf512 | 88%"), std::string::npos) << rep.output;
  EXPECT_NE(rep.output.find("| -             | -          |"), std::string::npos) << "unknown: '-'\n" << rep.output;
}

TEST(Cli, CheckCsvSaysWhatItDidNotCheckAndWhy) {
  const std::string out = tmp("check-skipped.csv");
  // 3x7: no whole block for the quantized kernels, any length for the float ones.
  const CliRun r = qmvlab("check --kernels 'q4_K.cpu.scalar_f32,f32.cpu.scalar' --shapes 3x7,2x256 --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("3 passed, 0 failed, 1 skipped"), std::string::npos) << r.output;
  const auto rows = qmv::read_check_csv(out);
  ASSERT_EQ(rows.size(), 3u * 2 + 1);
  int skipped = 0;
  for (const auto& row : rows) {
    if (row.activation != "skipped") continue;
    ++skipped;
    EXPECT_EQ(row.kernel, "q4_K.cpu.scalar_f32");
    EXPECT_EQ(row.cols, 7);
    EXPECT_FALSE(row.passed);
    EXPECT_NE(row.failure.find("shape not supported"), std::string::npos) << row.failure;
  }
  EXPECT_EQ(skipped, 1);
}

// Whether this process can run CUDA kernels: built with them, and a device present. The
// tests below decide from it what qmvlab must do, not from what qmvlab printed.
bool cuda_runs_here() {
  for (const qmv::KernelSpec& k : qmv::global_registry().all())
    if (k.backend == qmv::Backend::CUDA && qmv::availability(k).available) return true;
  return false;
}

// Asked for CUDA kernels alone, a check that could run none (no device, or a build
// without CUDA) fails in one line instead of passing with everything skipped; with a
// device the kernel is checked.
TEST(Cli, CheckOfCudaKernelsThatCannotRunFails) {
  const char* kernel = "q4_K.cuda.warp_f32";
  const bool built = qmv::global_registry().find(kernel) != nullptr;
  const CliRun r = qmvlab(std::string("check --kernels ") + kernel + " --shapes 3x256");
  if (!built) {
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find(std::string("unknown kernel '") + kernel + "'"), std::string::npos) << r.output;
  } else if (!cuda_runs_here()) {
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_NE(r.output.find("check: no CUDA kernel ran (1 skipped): nothing was checked"), std::string::npos)
        << r.output;
  } else {
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("1 passed, 0 failed"), std::string::npos) << r.output;
  }
}

// `peak --device cuda` measures the GPU alone: exit 1 with the reason where there is no
// device, the read and copy peaks where there is one.
TEST(Cli, GpuPeakWithoutADeviceFails) {
  const CliRun r = qmvlab("peak --device cuda --reps 1");
  EXPECT_EQ(r.output.find("peak read bandwidth"), std::string::npos) << "no CPU peak asked for:\n" << r.output;
  if (!cuda_runs_here()) {
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_NE(r.output.find("GPU peak: not measured"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("peak: the GPU was not measured:"), std::string::npos) << r.output;
  } else {
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("GPU read peak ("), std::string::npos) << r.output;
  }
  expect_error("peak --device tpu", "--device");
}

TEST(Cli, BenchAndPeakWriteCsvsWithShareOfPeak) {
  const std::string out = tmp("bench.csv");
  const CliRun r = qmvlab("bench --kernels q4_K.cpu.scalar_f32,q6_K.cpu.scalar_q8k --shapes 8x512 --threads 1 "
                       "--warm --reps 2 --min-time 0.01 --peak-reps 1 --peak-buffer-mib 64 --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("% of peak"), std::string::npos) << r.output;
  qmv::RunContext ctx;
  const auto rows = qmv::read_bench_csv(out, &ctx);
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& row : rows) {
    // The bytes a matvec moves (its weights, activations and outputs), over the times.
    const qmv::KernelSpec* k = qmv::global_registry().find(row.kernel);
    ASSERT_NE(k, nullptr) << row.kernel;
    const std::size_t weights = 8 * qmv::row_bytes(k->weight, 512), x = qmv::row_bytes(k->act, 512), y = 8 * 4;
    EXPECT_EQ(row.bytes_per_call, static_cast<std::int64_t>(weights + x + y)) << row.kernel;
    EXPECT_NEAR(row.gbps_median, row.bytes_per_call / (row.time_median_us * 1e3), 1e-6 * row.gbps_median);
    EXPECT_NEAR(row.gbps_best, row.bytes_per_call / (row.time_min_us * 1e3), 1e-6 * row.gbps_best);
    EXPECT_GT(row.gbps_median, 0);
    EXPECT_GT(row.peak_gbps, 0);
    EXPECT_NEAR(row.peak_pct, 100 * row.gbps_median / row.peak_gbps, 1e-9);
    EXPECT_LE(row.time_min_us, row.time_median_us);
    EXPECT_LE(row.time_median_us, row.time_max_us);
    EXPECT_EQ(row.repetitions, 2);
    EXPECT_EQ(row.cache, "warm");
  }
  EXPECT_NE(ctx.command.find("bench --kernels"), std::string::npos);
  EXPECT_FALSE(ctx.machine.empty());

  const std::string pout = tmp("peak.csv");
  const CliRun p = qmvlab("peak --threads 1 --reps 1 --buffer-mib 64 --out " + pout);
  ASSERT_EQ(p.code, 0) << p.output;
  const auto peaks = qmv::read_peak_csv(pout);
  ASSERT_EQ(peaks.size(), 1u);
  EXPECT_GT(peaks[0].gbps_best, 0);
  EXPECT_EQ(peaks[0].buffer_bytes, std::int64_t{64} << 20);
}

// A kernel with a weight transform gets its prepare time and prepared size in the CSV
// and one note under the table; one without leaves both columns empty. The file keeps
// the same header either way.
TEST(Cli, BenchRecordsTheWeightTransformApartFromTheMatvec) {
  const char* prepared = "q4_0.cpu.avx2_r8_q8_1";
  const char* plain = "q4_0.cpu.scalar_f32";
  const qmv::KernelSpec* k = qmv::global_registry().find(prepared);
  ASSERT_NE(k, nullptr);
  ASSERT_NE(qmv::global_registry().find(plain), nullptr);
  if (qmv::missing_cpu_features(k->cpu_features) != 0) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";
  const std::int64_t rows = 37, cols = 256;  // 37 rows: the last group of eight is padded
  const std::string out = tmp("bench-prepared.csv");
  const CliRun r = qmvlab(std::string("bench --kernels ") + prepared + "," + plain + " --shapes 37x256 --threads 1,2 "
                          "--warm --reps 1 --min-time 0.001 --peak-reps 1 --peak-buffer-mib 64 --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(std::string("prepared weights: ") + prepared + " 37x256: "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(std::string("prepared weights: ") + plain), std::string::npos) << r.output;
  // One note per kernel and shape, not per thread count.
  EXPECT_EQ(r.output.find("prepared weights: "), r.output.rfind("prepared weights: ")) << r.output;
  const auto rows_back = qmv::read_bench_csv(out);
  ASSERT_EQ(rows_back.size(), 4u);
  // Eight-row groups of plain Q4_0 blocks: 40 rows of cols / 32 blocks of 18 bytes.
  const std::int64_t expected_bytes = (rows + 7) / 8 * 8 * (cols / 32) * 18;
  for (const auto& row : rows_back) {
    if (row.kernel == prepared) {
      EXPECT_GT(row.prepare_us, 0) << row.threads;
      EXPECT_EQ(row.prepared_bytes, expected_bytes) << row.threads;
    } else {
      EXPECT_EQ(row.kernel, plain);
      EXPECT_EQ(row.prepare_us, 0);
      EXPECT_EQ(row.prepared_bytes, 0);
    }
  }
  // The text itself: the header of any CPU bench, and empty fields for the kernel
  // without a transform (the fields before `command`, quoted as it holds commas, end with
  // act_quant "none", its empty time, the two empty columns and n = 1).
  std::ifstream in(out);
  std::string header, line;
  std::getline(in, header);
  std::string expected_header;
  for (const auto& c : qmv::bench_header()) expected_header += (expected_header.empty() ? "" : ",") + c;
  EXPECT_EQ(header, expected_header);
  int plain_lines = 0;
  while (std::getline(in, line)) {
    const std::string before_command = line.substr(0, line.rfind(",\""));
    if (line.find(std::string(",") + plain + ",matvec,") == std::string::npos) continue;  // its kernel column
    ++plain_lines;
    EXPECT_EQ(before_command.substr(before_command.size() - 10), ",none,,,,1") << line;
  }
  EXPECT_EQ(plain_lines, 2);
}

}  // namespace
