// Experiment files, point expansion, sharding and the sweep CSV (reading, merging).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "harness/experiment.h"
#include "harness/machine.h"
#include "tests/test_seed.h"

namespace qmv {
namespace {

Status ok_run(const MatVecArgs&) { return Status::Ok(); }

// A registry of our own: a K-quant-shaped CPU kernel, a float one, and a GPU kernel
// that can never be available (an SM no device has).
Registry test_registry() {
  Registry r;
  KernelSpec k;
  k.name = "q4_K.cpu.fake";
  k.shape_rule = kSuperBlockColsRule;
  k.supports = supports_superblock_cols;
  k.run = ok_run;
  EXPECT_TRUE(r.add(k).ok());
  k.name = "f32.cpu.fake";
  k.weight = WeightType::F32;
  k.shape_rule = kAnyColsRule;
  k.supports = supports_any_cols;
  EXPECT_TRUE(r.add(k).ok());
  k.name = "q4_K.cuda.fake";
  k.weight = WeightType::Q4_K;
  k.backend = Backend::CUDA;
  k.min_sm = 9990;
  k.shape_rule = kSuperBlockColsRule;
  k.supports = supports_superblock_cols;
  EXPECT_TRUE(r.add(k).ok());
  return r;
}

const std::string kValid = R"(name = "t1"
description = "a test"
kernels = ["q4_K.*", "f32.cpu.fake"]
shapes = ["1x256", "3x100:attn_q", "qwen3-0.6b"]
threads = [1, "all", 1]
cache = ["cold", "warm"]
repetitions = 2
min_time = 0.01
check = false
)";

TEST(Experiment, ReadsEveryField) {
  const Registry reg = test_registry();
  const Experiment e = parse_experiment(kValid, "t1.toml", reg);
  EXPECT_EQ(e.name, "t1");
  EXPECT_EQ(e.description, "a test");
  EXPECT_EQ(e.kernel_globs, (std::vector<std::string>{"q4_K.*", "f32.cpu.fake"}));
  ASSERT_GE(e.shapes.size(), 3u);
  EXPECT_EQ(e.shapes[0].shape, (Shape{1, 256}));
  EXPECT_EQ(e.shapes[1], (TaggedShape{{3, 100}, "attn_q"}));
  // Qwen3-0.6B: width 1024, FFN 3072, 16 heads / 8 KV heads of 128, vocab 151936.
  const std::vector<TaggedShape> qwen3 = {{{2048, 1024}, "attn_q"},   {{1024, 1024}, "attn_k,attn_v"},
                                          {{1024, 2048}, "attn_out"}, {{3072, 1024}, "ffn_gate,ffn_up"},
                                          {{1024, 3072}, "ffn_down"}, {{151936, 1024}, "lm_head"}};
  EXPECT_EQ(std::vector<TaggedShape>(e.shapes.begin() + 2, e.shapes.end()), qwen3);
  const int all = machine_info().cores;
  EXPECT_EQ(e.threads, all == 1 ? std::vector<int>{1} : (std::vector<int>{1, all}));
  EXPECT_EQ(e.caches, (std::vector<std::string>{"cold", "warm"}));
  EXPECT_EQ(e.repetitions, 2);
  EXPECT_DOUBLE_EQ(e.min_time_s, 0.01);
  EXPECT_FALSE(e.check);
}

TEST(Experiment, DefaultsForOptionalKeys) {
  const Registry reg = test_registry();
  const Experiment e = parse_experiment("name = \"d\"\nkernels = [\"*\"]\nshapes = [\"1x256\"]\n", "d.toml", reg);
  EXPECT_EQ(e.threads, std::vector<int>{1});
  EXPECT_EQ(e.caches, std::vector<std::string>{"cold"});
  EXPECT_EQ(e.vectors, std::vector<int>{1});
  EXPECT_TRUE(e.check);
  EXPECT_GE(e.repetitions, 1);
  EXPECT_GT(e.min_time_s, 0);
}

// Each bad value sits on line 4, after three good lines, and the error names file,
// line and key.
TEST(Experiment, EveryErrorNamesFileKeyAndLine) {
  const Registry reg = test_registry();
  const std::string head = "name = \"e\"\nkernels = [\"*\"]\nshapes = [\"1x256\"]\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"frobnicate = 1", "key 'frobnicate': unknown key"},
      {"threads = [0]", "key 'threads': expected a positive integer"},
      {"threads = [\"some\"]", "key 'threads'"},
      {"threads = 2", "key 'threads': expected an array"},
      {"threads = []", "key 'threads': empty array"},
      {"cache = [\"lukewarm\"]", "key 'cache': expected \"cold\" or \"warm\""},
      {"cache = []", "key 'cache': empty array"},
      {"repetitions = \"3\"", "key 'repetitions'"},
      {"repetitions = 0", "key 'repetitions'"},
      {"min_time = 0", "key 'min_time'"},
      {"min_time = nan", "key 'min_time': expected seconds"},
      {"min_time = 9223372036854775807", "key 'min_time': expected seconds"},  // no double holds it
      {"check = \"yes\"", "key 'check': expected true or false"},
      {"description = 1", "key 'description': expected a string"},
  };
  for (const auto& [line, want] : cases) {
    try {
      parse_experiment(head + line + "\n", "bad.toml", reg);
      ADD_FAILURE() << "accepted " << line;
    } catch (const ExperimentError& e) {
      EXPECT_NE(std::string(e.what()).find("bad.toml:4: " + want), std::string::npos) << line << ": " << e.what();
    }
  }
  // Errors in the required keys themselves, on their own lines.
  const std::vector<std::pair<std::string, std::string>> required = {
      {"name = 5\nkernels = [\"*\"]\nshapes = [\"1x256\"]\n", "bad.toml:1: key 'name'"},
      {"name = \"a b\"\nkernels = [\"*\"]\nshapes = [\"1x256\"]\n", "bad.toml:1: key 'name'"},
      {"name = \"e\"\nkernels = \"*\"\nshapes = [\"1x256\"]\n", "bad.toml:2: key 'kernels': expected an array"},
      {"name = \"e\"\nkernels = []\nshapes = [\"1x256\"]\n", "bad.toml:2: key 'kernels': empty array"},
      {"name = \"e\"\nkernels = [\"nope.*\"]\nshapes = [\"1x256\"]\n", "bad.toml:2: key 'kernels': no kernel matches 'nope.*'"},
      {"name = \"e\"\nkernels = [\"*\", \"!q9_K.*\"]\nshapes = [\"1x256\"]\n",
       "bad.toml:2: key 'kernels': '!q9_K.*' excludes no kernel"},
      {"name = \"e\"\nkernels = [\"*\"]\nshapes = []\n", "bad.toml:3: key 'shapes': empty array"},
      {"name = \"e\"\nkernels = [\"*\"]\nshapes = [\n  \"1x256\",\n  \"llama-9\"]\n", "bad.toml:5: key 'shapes': bad shape 'llama-9'"},
      {"name = \"e\"\nkernels = [\"*\"]\nshapes = [256]\n", "bad.toml:3: key 'shapes': expected a preset name"},
      {"name = \"e\"\nkernels = [\"*\"]\nshapes = [\"4x256:ffn_sideways\"]\n", "unknown op 'ffn_sideways'"},
      {"name = \"e\"\nkernels = [\"*\"]\n", "bad.toml: missing key 'shapes'"},
      {"kernels = [\"*\"]\nshapes = [\"1x256\"]\n", "bad.toml: missing key 'name'"},
      {"name = \"e\"\nkernels = [\"*\"\nshapes = [\"1x256\"]\n", "bad.toml:3:"},  // TOML syntax
  };
  for (const auto& [text, want] : required) {
    try {
      parse_experiment(text, "bad.toml", reg);
      ADD_FAILURE() << "accepted " << text;
    } catch (const ExperimentError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << text << ": " << e.what();
    }
  }
  EXPECT_THROW(load_experiment("/nonexistent/x.toml", reg), ExperimentError);
}

TEST(Experiment, ModelPresetsAreTaggedByOp) {
  // Llama-3-8B: width 4096, FFN 14336, 32 heads / 8 KV heads of 128, vocab 128256.
  const auto l3 = parse_tagged_shapes("llama-3-8b");
  const std::vector<TaggedShape> want = {{{4096, 4096}, "attn_q,attn_out"}, {{1024, 4096}, "attn_k,attn_v"},
                                         {{14336, 4096}, "ffn_gate,ffn_up"}, {{4096, 14336}, "ffn_down"},
                                         {{128256, 4096}, "lm_head"}};
  EXPECT_EQ(l3, want);
  const auto q25 = parse_tagged_shapes("qwen2.5-7b");
  EXPECT_NE(std::find(q25.begin(), q25.end(), TaggedShape{{512, 3584}, "attn_k,attn_v"}), q25.end());
  EXPECT_NE(std::find(q25.begin(), q25.end(), TaggedShape{{3584, 18944}, "ffn_down"}), q25.end());
  EXPECT_NE(std::find(q25.begin(), q25.end(), TaggedShape{{152064, 3584}, "lm_head"}), q25.end());
  const auto tiny = parse_tagged_shapes("tinyllama-1.1b");
  EXPECT_NE(std::find(tiny.begin(), tiny.end(), TaggedShape{{256, 2048}, "attn_k,attn_v"}), tiny.end());
  EXPECT_NE(std::find(tiny.begin(), tiny.end(), TaggedShape{{2048, 5632}, "ffn_down"}), tiny.end());
  // The existing preset keeps its shapes and order.
  EXPECT_EQ(parse_shapes("llama-2-7b"),
            (std::vector<Shape>{{4096, 4096}, {11008, 4096}, {4096, 11008}, {32000, 4096}}));
  // Explicit tags join on a repeated shape, once each.
  EXPECT_EQ(parse_tagged_shapes("8x256:ffn_up,8x256:ffn_gate,8x256:ffn_up,4x512"),
            (std::vector<TaggedShape>{{{8, 256}, "ffn_up,ffn_gate"}, {{4, 512}, ""}}));
  EXPECT_THROW(parse_tagged_shapes("8x256:ffn_sideways"), std::invalid_argument);
}

TEST(Experiment, ExpansionKeepsUnrunnablePointsWithTheirReason) {
  const Registry reg = test_registry();
  const Experiment e = parse_experiment(kValid, "t1.toml", reg);
  const auto points = expand_points(e, reg);
  // Two CPU kernels at every thread count; the GPU kernel has none, so one point per
  // shape and cache state.
  const std::size_t per_shape = e.threads.size() * e.caches.size();
  ASSERT_GT(e.threads.size(), 1u);
  ASSERT_EQ(points.size(), (2 * per_shape + e.caches.size()) * e.shapes.size());
  std::set<std::string> keys;
  for (const auto& p : points) {
    keys.insert(point_key(p));
    const bool odd_cols = p.shape.shape.cols % 256 != 0;
    if (p.kernel->name == "q4_K.cuda.fake") {
      EXPECT_NE(p.skip_reason.find("unavailable"), std::string::npos) << p.skip_reason;
    } else if (p.kernel->name == "q4_K.cpu.fake" && odd_cols) {
      EXPECT_EQ(p.skip_reason, std::string("shape not supported (needs ") + kSuperBlockColsRule + ")");
    } else {
      EXPECT_EQ(p.skip_reason, "") << point_key(p);
    }
  }
  EXPECT_EQ(keys.size(), points.size()) << "points must be distinct";
}

TEST(Experiment, ShardsCoverEveryPointOnceWhateverElseIsThere) {
  std::mt19937 rng(qmv::testing::fresh_seed());
  std::vector<std::string> keys;
  for (int i = 0; i < 300; ++i)
    keys.push_back(point_key("k" + std::to_string(rng() % 50), 1 + rng() % 5000, 256 * (1 + rng() % 60),
                             1 + static_cast<int>(rng() % 4), rng() % 2 ? "cold" : "warm"));
  for (int n = 1; n <= 5; ++n) {
    std::vector<int> hits(n, 0);
    for (const auto& k : keys) {
      int owners = 0;
      for (int i = 1; i <= n; ++i)
        if (in_shard(k, {i, n})) {
          ++owners;
          ++hits[i - 1];
        }
      EXPECT_EQ(owners, 1) << k << " in " << owners << " of " << n << " shards";
    }
    for (int i = 0; i < n; ++i) EXPECT_GT(hits[i], 300 / n / 3) << "shard " << i + 1 << "/" << n << " is starved";
  }
  EXPECT_EQ(parse_shard("2/4").index, 2);
  EXPECT_EQ(parse_shard("2/4").count, 4);
  for (const char* bad : {"0/3", "4/3", "1/0", "3", "a/b", "1/", "/2", "-1/2"})
    EXPECT_THROW(parse_shard(bad), std::invalid_argument) << bad;
}

std::string tmp_path(const std::string& name) {
  const std::string dir = std::string(QMV_TEST_TMP) + "/experiment";
  std::filesystem::create_directories(dir);
  return dir + "/" + name;
}

// The context of rows written outside any Slurm job, wherever the tests run.
RunContext context_outside_slurm() {
  RunContext ctx = current_context("test");
  ctx.slurm_job_id = ctx.slurm_array_task_id = ctx.slurm_node = "";
  return ctx;
}

// Writes a sweep CSV of the given points (skipped rows, which need no timing).
void write_sweep(const std::string& path, const std::vector<SweepPoint>& points, const std::string& exp = "t1") {
  CsvWriter w(path, sweep_header(), false);
  const RunContext ctx = context_outside_slurm();
  for (const auto& p : points) w.write(sweep_fields(ctx, exp, p, nullptr, {}, "skipped", "a, \"quoted\" reason"));
}

TEST(Experiment, MergeJoinsSortsAndDropsDuplicates) {
  const Registry reg = test_registry();
  const auto points = expand_points(parse_experiment(kValid, "t1.toml", reg), reg);
  std::vector<SweepPoint> a, b;
  for (const auto& p : points) (in_shard(point_key(p), {1, 2}) ? a : b).push_back(p);
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  b.push_back(a.front());  // a point in both shards
  write_sweep(tmp_path("a.csv"), a);
  write_sweep(tmp_path("b.csv"), b);
  std::vector<std::string> dups;
  const CsvTable m = merge_sweeps({tmp_path("b.csv"), tmp_path("a.csv")}, &dups);
  ASSERT_EQ(m.rows.size(), points.size());
  EXPECT_EQ(dups.size(), 1u);
  std::vector<SweepPoint> sorted = points;
  std::sort(sorted.begin(), sorted.end(), point_less);
  for (std::size_t i = 0; i < sorted.size(); ++i) EXPECT_EQ(m.key(i), point_key(sorted[i]));
  EXPECT_EQ(m.rows[0][m.column("reason")], "a, \"quoted\" reason");

  std::ofstream(tmp_path("other.csv")) << "machine,kernel\nx,y\n";
  EXPECT_THROW(merge_sweeps({tmp_path("a.csv"), tmp_path("other.csv")}, &dups), std::runtime_error);
}

// A sweep timed before its kernels were renamed (kernels/former_names.h): its points are
// the kernels' under their names now, so a resumed sweep finds them done and a merge
// with a newer file keeps each point once.
TEST(Experiment, PointsUnderAFormerKernelNameReadUnderItsNameNow) {
  KernelSpec k;
  k.name = "q4_K.cpu.avx2_x4_q8k";
  k.run = ok_run;
  SweepPoint p;
  p.kernel = &k;
  p.shape = {{64, 256}, ""};
  p.cache = "cold";
  const std::string old = tmp_path("former-name.csv"), now = tmp_path("current-name.csv");
  write_sweep(now, {p});
  write_sweep(old, {p});
  {
    std::ifstream in(old);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto at = text.find(k.name);
    ASSERT_NE(at, std::string::npos);
    text.replace(at, k.name.size(), "q4_K.cpu.avx2_4row_q8k");
    std::ofstream(old, std::ios::trunc) << text;
  }
  const CsvTable t = read_sweep_csv(old);
  ASSERT_EQ(t.rows.size(), 1u);
  EXPECT_EQ(t.rows[0][t.column("kernel")], k.name);
  EXPECT_EQ(t.key(0), point_key(p));
  std::vector<std::string> dups;
  const CsvTable m = merge_sweeps({old, now}, &dups);
  EXPECT_EQ(m.rows.size(), 1u);
  EXPECT_EQ(dups.size(), 1u);
}

// Rows written in a Slurm job name it (the last columns). Files from before those
// columns, and from before the act_quant ones too, still read (flagged older_header,
// the columns they lack empty) and merge into the current columns.
TEST(Experiment, SweepRowsNameTheSlurmJobAndOlderFilesStillRead) {
  const Registry reg = test_registry();
  const auto points = expand_points(parse_experiment(kValid, "t1.toml", reg), reg);
  RunContext ctx = context_outside_slurm();
  ctx.slurm_job_id = "4242";
  ctx.slurm_array_task_id = "3";
  ctx.slurm_node = "node-7";
  const std::vector<std::string> header = sweep_header();
  ASSERT_GE(header.size(), 3u);
  EXPECT_EQ(std::vector<std::string>(header.end() - 3, header.end()),
            (std::vector<std::string>{"slurm_job_id", "slurm_array_task_id", "slurm_node"}));
  BenchRow timed;  // act_quant columns filled, so a file without them visibly loses them
  timed.act_quant = "before";
  timed.act_quant_median_us = 1.25;
  timed.time_median_us = 3.5;
  const auto row_of = [&](const SweepPoint& p) {
    BenchRow b = timed;
    b.kernel = p.kernel->name;
    b.rows = p.shape.shape.rows;
    b.cols = p.shape.shape.cols;
    b.threads = p.threads;
    b.cache = p.cache;
    return sweep_fields(ctx, "t1", p, &b, {}, "ok", "");
  };

  const std::string now = tmp_path("slurm-now.csv");
  {
    CsvWriter w(now, header, false);
    for (const auto& p : points) w.write(row_of(p));
  }
  EXPECT_EQ(detect_csv_kind(now), CsvKind::Sweep);
  const CsvTable t = read_sweep_csv(now);
  EXPECT_FALSE(t.older_header);
  ASSERT_EQ(t.rows.size(), points.size());
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    EXPECT_EQ(t.key(i), point_key(points[i]));
    EXPECT_EQ(t.rows[i][t.column("slurm_job_id")], "4242");
    EXPECT_EQ(t.rows[i][t.column("slurm_array_task_id")], "3");
    EXPECT_EQ(t.rows[i][t.column("slurm_node")], "node-7");
    EXPECT_EQ(t.rows[i][t.column("act_quant")], "before");
  }

  // Newest first: before the n column, also before the Slurm ones, also before act_quant.
  const auto legacy = legacy_sweep_headers();
  ASSERT_EQ(legacy.size(), 3u);
  std::vector<std::string> without_n = header;
  std::erase(without_n, "n");
  EXPECT_EQ(legacy[0], without_n);
  EXPECT_EQ(legacy[1], std::vector<std::string>(without_n.begin(), without_n.end() - 3));
  for (std::size_t v = 0; v < legacy.size(); ++v) {
    const std::string old = tmp_path("slurm-older-" + std::to_string(v) + ".csv");
    {
      CsvWriter w(old, legacy[v], false);
      for (const auto& p : points) {
        const std::vector<std::string> full = row_of(p);
        std::vector<std::string> f;
        for (const auto& c : legacy[v])
          f.push_back(full[static_cast<std::size_t>(std::find(header.begin(), header.end(), c) - header.begin())]);
        w.write(f);
      }
    }
    EXPECT_EQ(detect_csv_kind(old), CsvKind::Sweep) << old;
    const CsvTable o = read_sweep_csv(old);
    EXPECT_TRUE(o.older_header) << old;
    EXPECT_EQ(o.header, header);
    ASSERT_EQ(o.rows.size(), points.size());
    for (std::size_t i = 0; i < o.rows.size(); ++i) {
      EXPECT_EQ(o.key(i), point_key(points[i]));
      EXPECT_EQ(o.rows[i][o.column("time_median_us")], "3.5");
      EXPECT_EQ(o.rows[i][o.column("status")], "ok");
      EXPECT_EQ(o.rows[i][o.column("slurm_job_id")], v == 0 ? "4242" : "");
      EXPECT_EQ(o.rows[i][o.column("slurm_node")], v == 0 ? "node-7" : "");
      EXPECT_EQ(o.rows[i][o.column("act_quant")], v <= 1 ? "before" : "");
      EXPECT_EQ(o.rows[i][o.column("n")], "");
    }
    // An older shard merges with a current one, into the current columns.
    std::vector<std::string> dups;
    const CsvTable m = merge_sweeps({old, now}, &dups);
    EXPECT_EQ(m.header, header);
    EXPECT_EQ(m.rows.size(), points.size());
    EXPECT_EQ(dups.size(), points.size());
  }
}

// The n axis: a batch kernel gets a point per count up to its max_n, every other kernel
// the n = 1 point; the keys of n = 1 points are those from before the axis, the others'
// end in |n<n>, and the rows' n column reads back into the key.
TEST(Experiment, VectorCountsExpandBatchKernelsOnly) {
  Registry reg = test_registry();
  KernelSpec batch;
  batch.name = "q4_K.cpu.fake_batch";
  batch.op = OpKind::MatVecBatch;
  batch.max_n = 4;
  batch.shape_rule = kSuperBlockColsRule;
  batch.supports = supports_superblock_cols;
  batch.run = ok_run;
  ASSERT_TRUE(reg.add(batch).ok());
  const Experiment e = parse_experiment(
      "name = \"v\"\nkernels = [\"q4_K.cpu.*\"]\nshapes = [\"1x256\"]\nn = [1, 2, 8, 2]\ncheck = false\n", "v.toml", reg);
  EXPECT_EQ(e.vectors, (std::vector<int>{1, 2, 8}));
  const auto points = expand_points(e, reg);
  std::vector<std::string> keys;
  for (const auto& p : points) keys.push_back(point_key(p));
  EXPECT_EQ(keys, (std::vector<std::string>{"q4_K.cpu.fake|1x256|1|cold", "q4_K.cpu.fake_batch|1x256|1|cold",
                                            "q4_K.cpu.fake_batch|1x256|1|cold|n2"}));
  const std::string path = tmp_path("vectors.csv");
  {
    CsvWriter w(path, sweep_header(), false);
    for (const auto& p : points) {
      BenchRow b;
      b.kernel = p.kernel->name;
      b.rows = p.shape.shape.rows;
      b.cols = p.shape.shape.cols;
      b.threads = p.threads;
      b.cache = p.cache;
      b.n = p.n;
      b.time_median_us = 2.0;
      w.write(sweep_fields(context_outside_slurm(), "v", p, &b, {}, "ok", ""));
    }
  }
  const CsvTable t = read_sweep_csv(path);
  ASSERT_EQ(t.rows.size(), points.size());
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    EXPECT_EQ(t.key(i), keys[i]);
    EXPECT_EQ(t.rows[i][t.column("n")], std::to_string(points[i].n));
  }
  for (const char* bad : {"n = [0]", "n = [65]", "n = [\"all\"]"})
    EXPECT_THROW(parse_experiment(std::string("name = \"v\"\nkernels = [\"*\"]\nshapes = [\"1x256\"]\n") + bad + "\n",
                                  "bad.toml", reg),
                 ExperimentError)
        << bad;
}

TEST(Experiment, CutShortLastLineIsDroppedNotRefused) {
  const Registry reg = test_registry();
  const auto points = expand_points(parse_experiment(kValid, "t1.toml", reg), reg);
  write_sweep(tmp_path("cut.csv"), points);
  std::string text;
  {
    std::ifstream in(tmp_path("cut.csv"));
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  text.resize(text.size() - 20);  // cut inside the last row
  std::ofstream(tmp_path("cut.csv"), std::ios::trunc) << text;
  bool partial = false;
  const CsvTable t = read_sweep_csv(tmp_path("cut.csv"), &partial);
  EXPECT_TRUE(partial);
  EXPECT_EQ(t.rows.size(), points.size() - 1);
  std::vector<std::string> dups;
  EXPECT_THROW(merge_sweeps({tmp_path("cut.csv")}, &dups), std::runtime_error);
}

// A fault on a random row of a sweep CSV is named with the file and its line.
TEST(Experiment, SweepCsvErrorsNameFileAndLine) {
  const Registry reg = test_registry();
  const auto points = expand_points(parse_experiment(kValid, "t1.toml", reg), reg);
  const std::string path = tmp_path("broken-sweep.csv");
  write_sweep(path, points);
  std::vector<std::string> good;
  {
    std::ifstream in(path);
    for (std::string l; std::getline(in, l);) good.push_back(l);
  }
  ASSERT_EQ(good.size(), points.size() + 1);
  std::mt19937_64 g(qmv::testing::fresh_seed());
  const std::size_t row = 1 + g() % points.size();
  const auto error_with = [&](std::size_t index, const std::string& text) {
    std::vector<std::string> lines = good;
    lines[index] = text;
    {
      std::ofstream out(path, std::ios::trunc);
      for (const auto& l : lines) out << l << '\n';
    }
    try {
      read_sweep_csv(path);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string at = "broken-sweep.csv: line " + std::to_string(row + 1) + ": ";
  // rows is the 11th column (after the five context ones): replace its value.
  std::string bad_rows = good[row];
  std::size_t start = 0;
  for (int i = 0; i < 10; ++i) start = bad_rows.find(',', start) + 1;
  bad_rows.replace(start, bad_rows.find(',', start) - start, "4096x");
  std::string e = error_with(row, bad_rows);
  EXPECT_NE(e.find(at + "column rows: '4096x' is not a number"), std::string::npos) << e;
  e = error_with(row, good[row] + ",1");
  EXPECT_NE(e.find(at + "more fields than the header has columns"), std::string::npos) << e;
  ASSERT_EQ(good[row].back(), ',');  // a point that did not run: its last field is empty
  e = error_with(row, good[row] + "\"open");
  EXPECT_NE(e.find(at + "a quoted field is not closed"), std::string::npos) << e;
  e = error_with(0, good[0] + ",extra");
  EXPECT_NE(e.find("broken-sweep.csv: not a sweep CSV"), std::string::npos) << e;
}

}  // namespace
}  // namespace qmv
