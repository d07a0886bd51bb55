// Packing rendered conversations into fixed-length training rows without cropping any (issue 18,
// item 4; nanochat's SFT packs by best fit too).
//
// A row holds row_tokens + 1 ids: the model reads ids[0, row_tokens) and predicts ids[1,
// row_tokens] with a weight per target (the loss mask, shifted by one). Each item starts with
// <|endoftext|> (the chat format's begin token), which opens a new document for the attention
// mask (GptT::compute_positions), so items packed into one row never see each other. What is
// left of a row after its items is filled with <|endoftext|> at weight 0.
//
// Best fit decreasing: items are placed longest first, each into the open row with the least
// room that still fits it (a new row when none does), ties to the earliest row. It is a pure
// function of the items' lengths (lengths tied keep their input order), so the same items give
// the same rows on every run and thread count. An item longer than a row is an InputError (it
// would have to be cropped), naming the item.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace nanogpt {

// One rendered sequence: ids and, per id, whether it is a target that carries loss.
struct PackItem {
  std::span<const uint32_t> ids;
  std::span<const uint8_t> loss_mask;  // same length as ids
};

struct PackedRows {
  int64_t row_tokens = 0;  // inputs per row (the model's sequence length)
  int64_t rows = 0;
  std::vector<int32_t> ids;      // [rows, row_tokens + 1]
  std::vector<uint8_t> targets;  // [rows, row_tokens]: 1 where the target ids[t + 1] has loss
  std::vector<std::vector<int64_t>> items;  // per row, the items in it (input order indices)
  int64_t loss_tokens = 0;                  // Σ targets
  int64_t item_tokens = 0;                  // ids that belong to items (the rest is padding)
  // Inputs and targets of row r, as forward_backward takes them.
  std::span<const int32_t> row_inputs(int64_t r) const;
  std::span<const int32_t> row_targets(int64_t r) const;
  std::span<const uint8_t> row_weights(int64_t r) const;
};

// item_name(i) names item i in errors ("chat.jsonl:12").
PackedRows pack_rows(std::span<const PackItem> items, int64_t row_tokens, int32_t pad_id,
                     const std::function<std::string(size_t)>& item_name);

}  // namespace nanogpt
