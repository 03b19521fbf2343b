// libFuzzer targets for every parser of user input but the GGUF reader (fuzz_gguf.cpp),
// one binary with the target chosen by the environment variable QMV_FUZZ_TARGET:
//
//   experiment  an experiment TOML (parse_experiment)
//   plan_toml   a kernel plan TOML (KernelPlan::parse_toml)
//   plan_rules  `--plan` rules and the `--route-outliers=K` value
//   csv         a results CSV through a reader: bench, check, peak, sweep, compare's or
//               the tuning store's
//   summary     a results folder's file through `report --summary`
//   tokenizer   prompt text through a byte-level BPE and a SentencePiece-style tokenizer
//   cli         a command line (the input's words, split at spaces, tabs and newlines)
//               through qmvlab's option parsing of every subcommand, nothing run
//
// Any input is either accepted or refused with the parser's own exception, whose message
// is one line starting with the file name (for `--plan` rules "plan", for the outlier
// option "--route-outliers"; a refused command line is one line starting "qmvlab"). Everything else (a crash, a sanitizer report, another
// exception, a hang, a wrong message) is a finding: the target aborts. For the
// tokenizers, what encode returns must also decode back to the text, where their header
// says it does.
//
// With QMV_FUZZ_SEEDS=DIR, start-up first writes seed inputs made by the project's own
// writers into DIR (the CSV headers stay those of this build).
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "harness/cli/cli.h"
#include "harness/compare.h"
#include "harness/csv.h"
#include "harness/experiment.h"
#include "harness/summary.h"
#include "harness/tuning_store.h"
#include "model/plan.h"
#include "model/tokenizer.h"
#include "tests/gguf_writer.h"

namespace qmv {
namespace {

[[noreturn]] void finding(std::string_view what, std::string_view detail) {
  std::fprintf(stderr, "FINDING: %.*s: %.*s\n", static_cast<int>(what.size()), what.data(),
               static_cast<int>(detail.size()), detail.data());
  std::abort();
}

// A refusal must say where: one line that starts with `source`.
void check_message(const std::exception& e, std::string_view source) {
  const std::string_view m = e.what();
  if (m.substr(0, source.size()) != source) finding("the error does not start with the file name", m);
  if (m.find_first_of("\r\n") != std::string_view::npos) finding("the error is not one line", m);
}

// Runs `parse`; an exception of type E is a refusal (its message checked), any other one
// a finding.
template <class E, class Fn>
void refused_or_accepted(std::string_view source, Fn parse) {
  try {
    parse();
  } catch (const E& e) {
    check_message(e, source);
  } catch (const std::exception& e) {
    finding("an exception the parser does not document", e.what());
  }
}

constexpr const char* kTomlName = "fuzz.toml";

void fuzz_experiment(std::string_view text) {
  refused_or_accepted<ExperimentError>(kTomlName, [&] { (void)parse_experiment(text, kTomlName); });
}

void fuzz_plan_toml(std::string_view text) {
  refused_or_accepted<PlanError>(kTomlName, [&] { (void)KernelPlan::parse_toml(text, kTomlName); });
}

void fuzz_plan_rules(std::string_view text) {
  const std::string s(text);
  refused_or_accepted<PlanError>("plan", [&] { (void)KernelPlan::parse_rules(s).describe(); });
  refused_or_accepted<PlanError>("--route-outliers", [&] {
    KernelPlan plan;
    route_outliers_option(plan, s);
  });
}

// The file the CSV target writes each input to (the readers take a path), removed when
// the fuzzer exits.
const std::string& csv_path() {
  // Never destroyed: the exit handler runs after static destructors would have.
  static const std::string* path = [] {
    const auto* p = new std::string(
        (std::filesystem::temp_directory_path() / ("qmv_fuzz_" + std::to_string(getpid()) + ".csv")).string());
    std::atexit([] { std::filesystem::remove(csv_path()); });
    return p;
  }();
  return *path;
}

// The first byte picks the reader, the rest is the file: each reader allocates a large
// line buffer, which the address sanitizer makes costly, so one reader runs per input.
enum CsvReader { kBench, kCheck, kPeak, kSweep, kResults, kTuningStore, kCsvReaders };

void fuzz_csv(std::string_view input) {
  if (input.empty()) return;
  const auto reader = static_cast<CsvReader>(static_cast<unsigned char>(input[0]) % kCsvReaders);
  const std::string& path = csv_path();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(input.data() + 1, static_cast<std::streamsize>(input.size() - 1));
  }
  refused_or_accepted<std::runtime_error>(path, [&] { (void)detect_csv_kind(path); });
  switch (reader) {
    case kBench:
      refused_or_accepted<std::runtime_error>(path, [&] {
        RunContext ctx;
        (void)read_bench_csv(path, &ctx);
      });
      break;
    case kCheck: refused_or_accepted<std::runtime_error>(path, [&] { (void)read_check_csv(path); }); break;
    case kPeak: refused_or_accepted<std::runtime_error>(path, [&] { (void)read_peak_csv(path); }); break;
    case kSweep:
      refused_or_accepted<std::runtime_error>(path, [&] {
        bool partial = false;
        const CsvTable t = read_sweep_csv(path, &partial);
        // What the sweep command does with a file it read: keys and a merge.
        for (std::size_t i = 0; i < t.rows.size(); ++i) (void)t.key(i);
        if (!partial) {
          std::vector<std::string> duplicates;
          (void)merge_sweeps({path}, &duplicates);
        }
      });
      break;
    case kResults: refused_or_accepted<CompareError>(path, [&] { (void)read_results_csv(path); }); break;
    case kTuningStore:
      refused_or_accepted<std::runtime_error>(path, [&] { (void)TuningStore(path).read_all(); });
      // What `auto` reads never throws: a damaged store is a warning.
      try {
        std::string warning;
        (void)TuningStore(path).usable_rows(&warning);
        if (warning.find('\n') != std::string::npos) finding("the store's warning is not one line", warning);
      } catch (const std::exception& e) {
        finding("usable_rows threw", e.what());
      }
      break;
    case kCsvReaders: break;
  }
}

// The folder the summary target writes each input to, removed when the fuzzer exits.
const std::filesystem::path& summary_dir() {
  static const std::filesystem::path* dir = [] {
    const auto* d = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                             ("qmv_fuzz_summary_" + std::to_string(getpid())));
    std::filesystem::create_directories(*d);
    std::atexit([] { std::filesystem::remove_all(summary_dir()); });
    return d;
  }();
  return *dir;
}

// The files `report --summary` reads from a results folder; the input's first byte
// picks which one the rest of it becomes (the others are absent).
constexpr const char* kSummaryFiles[] = {"default.csv", "decode-vs-llamacpp.csv", "decode.csv", "peak.csv",
                                         "check.csv"};
constexpr std::size_t kSummaryFileCount = std::size(kSummaryFiles);

void fuzz_summary(std::string_view input) {
  if (input.empty()) return;
  const std::filesystem::path& dir = summary_dir();
  for (const char* f : kSummaryFiles) std::filesystem::remove(dir / f);
  const char* name = kSummaryFiles[static_cast<unsigned char>(input[0]) % kSummaryFileCount];
  std::ofstream(dir / name, std::ios::binary).write(input.data() + 1, static_cast<std::streamsize>(input.size() - 1));
  refused_or_accepted<std::runtime_error>(dir.string(), [&] {
    const ResultsSummary summary = summarize_results(dir.string());
    (void)summary_text(summary);
    (void)summary_markdown(summary, (dir / "REPORT.md").string());
  });
}

// Tokenizers whose vocabularies spell any text: every byte has a token.
struct Tokenizers {
  std::vector<std::uint8_t> bpe_bytes, spm_bytes;
  gguf::File bpe_file, spm_file;
  Tokenizer bpe, spm;
  Tokenizers()
      : bpe_bytes(make_bpe()),
        spm_bytes(make_spm()),
        bpe_file(gguf::File::parse(bpe_bytes)),
        spm_file(gguf::File::parse(spm_bytes)),
        bpe(Tokenizer::from_gguf(bpe_file)),
        spm(Tokenizer::from_gguf(spm_file)) {}

  // Byte-level BPE: GPT-2's 256 byte symbols, a few merges, two special tokens, and the
  // pre-tokenizer with the digit split.
  static std::vector<std::uint8_t> make_bpe() {
    std::vector<std::string> tokens = {"<|endoftext|>", "<|im_start|>"};
    std::vector<std::int32_t> types = {3, 4};
    for (int b = 0; b < 256; ++b) {
      tokens.push_back(byte_level_alphabet().text[b]);
      types.push_back(1);
    }
    const std::vector<std::string> merges = {"\xC4\xA0 t", "h e", "t h", "\xC4\xA0t h", "i n", "e r", "\xC4\xA0 a",
                                             "r e", "o n", "\xC4\xA0th e", "l l", "he ll", "1 2"};
    for (const std::string& m : merges) {
      tokens.push_back(m.substr(0, m.find(' ')) + m.substr(m.find(' ') + 1));
      types.push_back(1);
    }
    testing::GgufWriter w;
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string("tokenizer.ggml.pre", "smollm");
    w.add_string_array("tokenizer.ggml.tokens", tokens);
    w.add_i32_array("tokenizer.ggml.token_type", types);
    w.add_string_array("tokenizer.ggml.merges", merges);
    w.add_u32("tokenizer.ggml.bos_token_id", 0);
    w.add_u32("tokenizer.ggml.eos_token_id", 0);
    return w.bytes();
  }

  // SentencePiece-style: the unknown, BOS and EOS tokens, 256 byte tokens, "▁" and a few
  // scored pieces, and a user-defined token matched whole.
  static std::vector<std::uint8_t> make_spm() {
    const std::string sp = "\xE2\x96\x81";
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    std::vector<float> scores = {0, 0, 0};
    std::vector<std::int32_t> types = {2, 3, 3};
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      tokens.emplace_back(name);
      scores.push_back(0);
      types.push_back(6);
    }
    float score = -1;
    for (const std::string& p : {sp, std::string("e"), std::string("t"), std::string("h"), std::string("l"),
                                 std::string("o"), sp + "t", std::string("he"), sp + "the", std::string("ll"),
                                 std::string("hell"), sp + sp, std::string("\xC3\xA9"), std::string("1")}) {
      tokens.push_back(p);
      scores.push_back(score--);
      types.push_back(1);
    }
    tokens.emplace_back("[INST]");
    scores.push_back(0);
    types.push_back(4);
    testing::GgufWriter w;
    w.add_string("tokenizer.ggml.model", "llama");
    w.add_string_array("tokenizer.ggml.tokens", tokens);
    w.add_f32_array("tokenizer.ggml.scores", scores);
    w.add_i32_array("tokenizer.ggml.token_type", types);
    w.add_u32("tokenizer.ggml.bos_token_id", 1);
    w.add_u32("tokenizer.ggml.eos_token_id", 2);
    w.add_u32("tokenizer.ggml.unknown_token_id", 0);
    return w.bytes();
  }
};

const Tokenizers& tokenizers() {
  static const Tokenizers t;
  return t;
}

bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    i += n;
  }
  return true;
}

void check_ids(const Tokenizer& t, const std::vector<int>& ids) {
  for (int id : ids)
    if (id < 0 || id >= t.vocab_size()) finding("a token id out of range", std::to_string(id));
}

void fuzz_tokenizer(std::string_view text) {
  const Tokenizers& t = tokenizers();
  try {
    // Byte-level BPE spells every byte string and decodes back to it.
    const std::vector<int> ids = t.bpe.encode(text, false);
    check_ids(t.bpe, ids);
    if (t.bpe.decode(ids) != text) finding("byte-level BPE: decode(encode(text)) differs", text);

    const std::vector<int> spm = t.spm.encode(text, true, true);
    check_ids(t.spm, spm);
    // The round trip tokenizer.h promises: valid UTF-8 without "▁" of its own.
    if (valid_utf8(text) && text.find("\xE2\x96\x81") == std::string_view::npos &&
        t.spm.decode(spm) != t.spm.decode(t.spm.bos()) + std::string(text) + t.spm.decode(t.spm.eos()))
      finding("SentencePiece: decode(encode(text)) differs", text);
  } catch (const std::exception& e) {
    finding("encode refused text its vocabulary can spell", e.what());
  }
}

// The command line parses, or is refused with exit code 2 and one line; a parse that
// throws anything else, or runs anything, is a finding (parse_cli_only runs nothing).
void fuzz_cli(std::string_view input) {
  std::vector<std::string> words = {"qmvlab"};
  for (std::size_t start = 0; start < input.size();) {
    const std::size_t end = std::min(input.find_first_of(" \t\n", start), input.size());
    if (end > start) words.emplace_back(input.substr(start, end - start));
    start = end + 1;
  }
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  std::string error;
  int code = 0;
  try {
    code = parse_cli_only(static_cast<int>(words.size()), argv.data(), &error);
  } catch (const std::exception& e) {
    finding("the command line parser threw", e.what());
  }
  if (code == 0) return;
  if (code != 2) finding("a refused command line's exit code is not 2", std::to_string(code));
  if (error.rfind("qmvlab", 0) != 0) finding("the refusal does not start with \"qmvlab\"", error);
  if (error.find_first_of("\r\n") != std::string::npos) finding("the refusal is not one line", error);
}

// Seeds from the project's writers, so that they follow the current columns.
void write_csv_seeds(const std::filesystem::path& dir) {
  const RunContext ctx{"machine", "cpu, model", "none", "gcc", "abc123", "qmvlab bench --shapes 1x256"};
  BenchRow b;
  b.kernel = "q4_K.cpu.scalar_f32";
  b.op = "matvec";
  b.weight_type = "q4_K";
  b.act_format = "f32";
  b.backend = "cpu";
  b.rows = 4096;
  b.cols = 14336;
  b.threads = 2;
  b.cache = "cold";
  b.repetitions = 5;
  b.time_min_us = 1.5;
  b.time_median_us = 2.25;
  b.time_max_us = 3e2;
  b.bytes_per_call = 33030144;
  b.gbps_median = 14.5;
  b.gbps_best = 15;
  b.peak_gbps = 20.125;
  b.peak_pct = 72.05;
  b.gflops = 0.5;
  BenchRow gpu = b;
  gpu.kernel = "q4_K.cuda.warp_f32";
  gpu.backend = "cuda";
  gpu.gpu_name = "NVIDIA H100";
  gpu.gpu_driver = "570.1";
  gpu.launches_per_rep = 16;
  gpu.datasheet_gbps = 3350;
  // Each file once for each reader that takes it (the input's first byte).
  const auto write = [&](const std::string& name, const std::vector<std::string>& header,
                         const std::vector<std::vector<std::string>>& rows, std::vector<CsvReader> readers) {
    const std::filesystem::path csv = dir / (name + ".csv");
    {
      CsvWriter w(csv.string(), header, false);
      for (const auto& r : rows) w.write(r);
    }
    std::string text;
    {
      std::ifstream in(csv, std::ios::binary);
      text.assign(std::istreambuf_iterator<char>(in), {});
    }
    std::filesystem::remove(csv);
    for (const CsvReader r : readers)
      std::ofstream(dir / (name + "." + std::to_string(r)), std::ios::binary) << static_cast<char>(r) << text;
  };
  write("bench", bench_header(), {bench_fields(ctx, b), bench_fields(ctx, b)}, {kBench, kResults});
  write("bench_gpu", bench_header(true), {bench_fields(ctx, b, true), bench_fields(ctx, gpu, true)},
        {kBench, kResults});
  CheckRow c;
  c.kernel = "q4_K.cpu.scalar_f32";
  c.seed = 1234567890123ull;
  c.nmse_kernel = 1e-14;
  c.failure = "NMSE \"2e-3\" > 1e-9, see log";
  write("check", check_header(), {check_fields(ctx, c)}, {kCheck});
  write("peak", peak_header(), {peak_fields(ctx, PeakRow{2, 1 << 30, 7, 17.5, 16.25})}, {kPeak});
  PeakRow gp{0, 1 << 30, 7, 3000, 2900.5, "cuda", 3350};
  write("peak_gpu", peak_header(true), {peak_fields(ctx, gp, true), peak_fields(ctx, PeakRow{}, true)}, {kPeak});
  // A sweep row: the bench columns, the sweep's, then the Slurm job's; a point that did
  // not run leaves its measurement columns empty.
  std::vector<std::string> ran = sweep_bench_fields(ctx, b), skipped = sweep_bench_fields(ctx, b);
  for (const char* f : {"ci", "ffn_up,ffn_gate", "ok", "", "1", "1e-14", "2e-5", "3e-4", "4242", "3", "node7"})
    ran.push_back(f);
  skipped[11] = "4";
  for (std::size_t i = 14; i + 1 < skipped.size(); ++i) skipped[i].clear();
  for (const char* f : {"ci", "", "skipped", "unavailable: needs avx512_vnni", "", "", "", "", "", "", ""})
    skipped.push_back(f);
  write("sweep", sweep_header(), {ran, skipped}, {kSweep, kResults, kBench});
}

// Seeds for the summary target: a sweep as default.csv (first byte 0) and a decode
// comparison (first byte 1).
void write_summary_seeds(const std::filesystem::path& dir) {
  write_csv_seeds(dir);
  const std::filesystem::path sweep = dir / ("sweep." + std::to_string(kSweep));
  std::string text;
  {
    std::ifstream in(sweep, std::ios::binary);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  for (const auto& f : std::filesystem::directory_iterator(dir)) std::filesystem::remove(f.path());
  std::ofstream(dir / "default", std::ios::binary) << '\0' << text.substr(1);
  std::ofstream(dir / "decode", std::ios::binary)
      << '\1'
      << "machine,cpu_model,qmvlab_commit,peer,model,model_file,weights,threads,tokens,rounds,qmvlab_tok_s,"
         "llamacpp_tok_s,llamacpp_norepack_tok_s,ratio,roofline_tok_s,qmvlab_roofline_pct,llamacpp_roofline_pct,"
         "qmvlab_plan,command\n"
         "m,\"cpu, x\",abc,llama.cpp 0c1e570,SmolLM2,models/a.gguf,Q4_1,2,64,3,114.5,151.25,150,0.757,260,44,58,"
         "auto,\"scripts/compare_llamacpp.py --threads 2\"\n";
}

void write_text_seeds(const std::filesystem::path& dir, const std::vector<std::string>& texts) {
  int i = 0;
  for (const std::string& t : texts) std::ofstream(dir / ("seed" + std::to_string(i++))) << t;
}

void write_seeds(const std::string& target, const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  if (target == "csv") write_csv_seeds(dir);
  if (target == "summary") write_summary_seeds(dir);
  if (target == "plan_rules")
    write_text_seeds(dir, {"q4_K=q4_K.cpu.avx2_q8k,*=auto", "ffn_down.q6_K=q6_K.cpu.scalar_f32,attn_q=auto",
                           "outliers.route=true,outliers.k=8,outliers.q6_K=q6_K.cpu.avx2_f32",
                           "ffn_up_gate=none,outliers.*=x", "8", "0.5", "1e300"});
  if (target == "tokenizer")
    write_text_seeds(dir, {"The capital of France is Paris.", "<s>[INST] hello there [INST]</s> 12 345",
                           " hello  world\n\tthe end ", "caf\xC3\xA9 \xE2\x96\x81 \xF0\x9F\x98\x80 \xFF\xC3",
                           "<|im_start|>user\nhello<|endoftext|>", "I've it's we'll 2024-01-01"});
}

using Target = void (*)(std::string_view);
const std::map<std::string, Target>& targets() {
  static const std::map<std::string, Target> t = {{"experiment", fuzz_experiment},
                                                  {"plan_toml", fuzz_plan_toml},
                                                  {"plan_rules", fuzz_plan_rules},
                                                  {"csv", fuzz_csv},
                                                  {"summary", fuzz_summary},
                                                  {"tokenizer", fuzz_tokenizer},
                                                  {"cli", fuzz_cli}};
  return t;
}

Target g_target = nullptr;

}  // namespace
}  // namespace qmv

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* name = std::getenv("QMV_FUZZ_TARGET");
  const auto& targets = qmv::targets();
  const auto it = name ? targets.find(name) : targets.end();
  if (it == targets.end()) {
    std::string known;
    for (const auto& [n, fn] : targets) known += " " + n;
    std::fprintf(stderr, "set QMV_FUZZ_TARGET to one of:%s\n", known.c_str());
    std::exit(2);
  }
  qmv::g_target = it->second;
  if (const char* seeds = std::getenv("QMV_FUZZ_SEEDS")) qmv::write_seeds(it->first, seeds);
  if (it->first == "tokenizer") (void)qmv::tokenizers();
  // What --help, --version and `list --shapes` print while parsing is not looked at.
  if (it->first == "cli" && !std::freopen("/dev/null", "w", stdout)) std::exit(2);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  qmv::g_target(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
