#include "data/shard_builder.hpp"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "data/token_shard.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/progress_bar.hpp"
#include "runtime/thread_pool.hpp"

namespace nanogpt {

namespace fs = std::filesystem;

namespace {

// Documents are copied into batches of about this many bytes, encoded in parallel, then
// written in order; this bounds memory whatever the corpus size.
constexpr size_t kBatchBytes = 8u << 20;

struct PendingDocument {
  size_t offset, length;
  std::string origin;  // "file:line", for errors
  bool validation;
};

void remove_stale_files(const std::string& dir, const std::vector<std::string>& keep_train,
                        const std::vector<std::string>& keep_val) {
  auto kept = [&](const std::string& name) {
    return std::find(keep_train.begin(), keep_train.end(), name) != keep_train.end() ||
           std::find(keep_val.begin(), keep_val.end(), name) != keep_val.end();
  };
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::string name = entry.path().filename().string();
    bool shard = (name.rfind("train_", 0) == 0 || name.rfind("val_", 0) == 0) && name.size() > 4 &&
                 name.compare(name.size() - 4, 4, ".bin") == 0;
    bool temp = name.find(kTempMarker) != std::string::npos;
    if ((shard && !kept(name)) || temp) fs::remove(entry.path());
  }
}

}  // namespace

bool is_validation_document(uint64_t k, uint64_t val_count, uint64_t total) {
  if (total == 0) return false;
  // floor(k·N/D) without forming k·N, which can overflow 64 bits for web-scale corpora:
  // with k = q·D + r, floor(k·N/D) = q·N + floor(r·N/D), and r·N < D·N fits when D·N does;
  // long double keeps the rare huge case exact enough to decide a floor step.
  auto floor_kn_over_d = [&](uint64_t kk) {
    uint64_t q = kk / total, r = kk % total;
    long double frac = static_cast<long double>(r) * static_cast<long double>(val_count) /
                       static_cast<long double>(total);
    return q * val_count + static_cast<uint64_t>(frac);
  };
  return floor_kn_over_d(k + 1) > floor_kn_over_d(k);
}

ShardBuildResult build_token_shards(const BpeTokenizer& tokenizer,
                                    const ShardBuildOptions& options) {
  auto start_time = std::chrono::steady_clock::now();
  if (tokenizer.vocab_size() > kShardMaxVocab) {
    throw InputError(
        "tokenizer '" + tokenizer.spec() + "' has " + std::to_string(tokenizer.vocab_size()) +
        " tokens; .bin shards store uint16 ids, so the vocabulary must be at most 65536");
  }
  const uint32_t eot = tokenizer.eot_id();
  if (options.val_docs && options.val_fraction) {
    throw InputError("give --val-docs or --val-fraction, not both");
  }
  if (options.val_fraction && !(*options.val_fraction >= 0.0 && *options.val_fraction < 1.0)) {
    throw InputError("--val-fraction must be in [0, 1)");
  }
  std::error_code ec;
  fs::create_directories(options.output_dir, ec);
  if (ec) throw SystemError("cannot create directory", options.output_dir, ec.value());
  // An interrupted run must never look complete: meta.json goes first, and comes back last.
  const std::string meta_path = options.output_dir + "/meta.json";
  fs::remove(meta_path, ec);

  // Pass 1: count documents so the validation split can be exact and evenly spread.
  CorpusStats counted =
      for_each_document(options.corpus, [](std::string_view, const DocumentOrigin&) {});
  if (counted.documents == 0) throw InputError("the input holds no non-empty documents");
  const uint64_t total_docs = counted.documents;
  uint64_t val_count = 0;
  if (options.val_docs) {
    val_count = *options.val_docs;
    if (val_count >= total_docs) {
      throw InputError("--val-docs " + std::to_string(val_count) +
                       " leaves no training data: the input has " + std::to_string(total_docs) +
                       " non-empty documents");
    }
  } else {
    double f = options.val_fraction.value_or(0.01);
    val_count = static_cast<uint64_t>(std::llround(f * static_cast<double>(total_docs)));
    if (f > 0 && val_count == 0) val_count = 1;
    if (val_count >= total_docs) val_count = total_docs - 1;
  }

  ShardWriter train(options.output_dir, "train", options.shard_tokens);
  ShardWriter val(options.output_dir, "val", options.shard_tokens);
  ProgressBar progress("tokenizing", counted.bytes);
  ThreadPool& pool = ThreadPool::global();
  ShardBuildResult result;

  std::string arena;
  std::vector<PendingDocument> pending;
  std::vector<std::vector<uint32_t>> encoded;
  uint64_t doc_index = 0;
  uint64_t bytes_done = 0;

  auto flush = [&] {
    encoded.resize(pending.size());
    pool.parallel_for(pending.size(), [&](size_t i, int) {
      const PendingDocument& d = pending[i];
      std::vector<uint32_t>& ids = encoded[i];
      ids.clear();
      ids.push_back(eot);
      try {
        // As the speedrun's data preparation: document text is ordinary text, so a literal
        // "<|endoftext|>" inside it is not a separator.
        tokenizer.encode_append(std::string_view(arena).substr(d.offset, d.length), false, ids);
      } catch (const InputError& e) {
        throw InputError(d.origin + ": " + e.what());
      }
    });
    for (size_t i = 0; i < pending.size(); ++i) {
      (pending[i].validation ? val : train).append(encoded[i]);
      bytes_done += pending[i].length;
    }
    progress.update(bytes_done);
    arena.clear();
    pending.clear();
  };

  result.corpus = for_each_document(options.corpus, [&](std::string_view doc,
                                                        const DocumentOrigin& o) {
    bool is_val = is_validation_document(doc_index++, val_count, total_docs);
    pending.push_back({arena.size(), doc.size(), *o.file + ":" + std::to_string(o.line), is_val});
    arena.append(doc);
    (is_val ? result.val_documents : result.train_documents) += 1;
    if (arena.size() >= kBatchBytes) flush();
  });
  flush();
  if (result.corpus.documents != total_docs) {
    throw InputError("the input files changed while being read; run again on stable inputs");
  }
  result.train_shards = train.finish();
  result.val_shards = val.finish();
  result.train_tokens = train.total_tokens();
  result.val_tokens = val.total_tokens();
  progress.finish();
  remove_stale_files(options.output_dir, result.train_shards, result.val_shards);

  nlohmann::ordered_json meta;
  meta["format"] =
      "modded-nanogpt/llm.c token shards (header 256 x int32: magic 20240520, version 1, count; "
      "uint16 tokens)";
  meta["tokenizer"] = {{"spec", tokenizer.spec()},
                       {"sha256", tokenizer.sha256()},
                       {"vocab_size", tokenizer.vocab_size()},
                       {"eot_id", eot}};
  meta["inputs"] = options.corpus.files;
  meta["doc_separator"] = options.corpus.doc_separator
                              ? nlohmann::ordered_json(*options.corpus.doc_separator)
                              : nlohmann::ordered_json(nullptr);
  meta["documents"] = {{"train", result.train_documents},
                       {"val", result.val_documents},
                       {"empty_skipped", result.corpus.empty_documents}};
  meta["tokens"] = {{"train", result.train_tokens}, {"val", result.val_tokens}};
  meta["shard_tokens"] = options.shard_tokens;
  meta["shards"] = {{"train", result.train_shards}, {"val", result.val_shards}};
  write_file_atomic(meta_path, meta.dump(2) + "\n");
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
  return result;
}

}  // namespace nanogpt
