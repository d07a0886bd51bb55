// Counting a letter in a word ("strawberry" has three r's). Words are generated pseudo-words
// (syllables of onsets, vowels and codas), so the family needs no word list and never changes
// with the machine's dictionary. Levels 1..4: words of 3-6, 6-10, 10-15 and 15-24 letters. The
// letter is one of the word's own three times in four, else any of a..z (the count may be 0).
// Question `How many times does the letter "r" appear in "strawberry"?`, answer "3".
#pragma once

#include <memory>

#include "eval/task_family.hpp"

namespace nanogpt {

std::unique_ptr<TaskFamily> make_letter_count_task();

}  // namespace nanogpt
