#include "evals/tasks/ruler_words.h"

#include <cctype>
#include <numeric>

#include "core/util/error.h"
#include "evals/metrics/metrics.h"

namespace kvevict::evals::ruler {
namespace {

// Typed for this project: animals, food, objects, places, trades, clothes, materials, colours,
// seasons, shapes, games. Filtered so that no word contains another and none occurs in the filler.
const char* const kWords[] = {
    "beaver", "bison", "camel", "cheetah", "cobra", "coyote", "donkey", "eagle", "falcon", "ferret", "gecko",
    "giraffe", "gorilla", "hamster", "hedgehog", "heron", "hippo", "hyena", "iguana", "jaguar", "koala",
    "lemur", "leopard", "lizard", "llama", "lobster", "magpie", "mole", "monkey", "moose", "octopus",
    "ostrich", "otter", "panda", "parrot", "pelican", "penguin", "pigeon", "rabbit", "raccoon", "salmon",
    "seal", "shark", "sheep", "skunk", "sloth", "snail", "sparrow", "spider", "squid", "squirrel", "swan",
    "tiger", "toad", "trout", "turkey", "turtle", "walrus", "weasel", "whale", "wolf", "zebra", "buffalo",
    "cricket", "beetle", "wasp", "hornet", "lamb", "goose", "duck", "chicken", "puppy", "kitten", "pony",
    "mule", "goat", "donut", "banana", "cherry", "grape", "lime", "mango", "melon", "olive", "peach",
    "raisin", "walnut", "almond", "peanut", "cashew", "carrot", "celery", "garlic", "ginger", "lettuce",
    "onion", "pepper", "potato", "radish", "spinach", "tomato", "turnip", "cabbage", "broccoli", "cucumber",
    "mushroom", "noodle", "pasta", "pizza", "pretzel", "biscuit", "muffin", "pancake", "waffle", "yogurt",
    "cheese", "butter", "honey", "pickle", "sausage", "bacon", "salad", "soup", "sandwich", "cereal", "candy",
    "toffee", "custard", "pudding", "omelet", "burrito", "taco", "sushi", "hammer", "wrench", "shovel",
    "ladder", "bucket", "saddle", "anchor", "compass", "magnet", "pencil", "crayon", "eraser", "marker",
    "notebook", "envelope", "stamp", "ribbon", "button", "zipper", "needle", "thread", "scissors", "blanket",
    "pillow", "curtain", "carpet", "mirror", "window", "chair", "sofa", "couch", "desk", "drawer", "shelf",
    "cupboard", "closet", "lamp", "candle", "teapot", "spoon", "fork", "knife", "plate", "bowl", "bottle",
    "violin", "guitar", "piano", "trumpet", "flute", "drum", "banjo", "cello", "harp", "tuba", "trombone",
    "saxophone", "hill", "canyon", "desert", "forest", "jungle", "meadow", "prairie", "swamp", "marsh",
    "island", "beach", "coast", "cliff", "cave", "glacier", "volcano", "lagoon", "pond", "lake", "ocean",
    "creek", "stream", "waterfall", "rainbow", "thunder", "lightning", "storm", "cloud", "breeze", "frost",
    "blizzard", "drizzle", "hail", "castle", "palace", "cottage", "cabin", "barn", "temple", "church",
    "school", "hospital", "library", "theater", "stadium", "airport", "bakery", "factory", "garage", "hotel",
    "prison", "doctor", "nurse", "sailor", "soldier", "lawyer", "dentist", "painter", "writer", "poet",
    "artist", "chef", "waiter", "driver", "banker", "shirt", "jacket", "sweater", "scarf", "glove", "mitten",
    "sock", "boot", "sandal", "slipper", "helmet", "collar", "pocket", "sleeve", "belt", "purse", "umbrella",
    "necklace", "bracelet", "earring", "bicycle", "wagon", "truck", "tractor", "rocket", "canoe", "kayak",
    "yacht", "subway", "taxi", "scooter", "sled", "silver", "bronze", "marble", "granite", "pebble",
    "crystal", "diamond", "emerald", "ruby", "pearl", "velvet", "cotton", "wool", "silk", "leather", "denim",
    "linen", "puzzle", "riddle", "ticket", "trophy", "medal", "banner", "poster", "postcard", "calendar",
    "diary", "journal", "magazine", "novel", "comic", "orange", "purple", "violet", "crimson", "scarlet",
    "maroon", "indigo", "lavender", "beige", "ivory", "amber", "golden", "spring", "autumn", "monday",
    "friday", "sunday", "january", "august", "october", "midnight", "dawn", "dusk", "circle", "square",
    "triangle", "cube", "sphere", "pyramid", "spiral", "tunnel", "highway", "street", "avenue", "fence",
    "gate", "roof", "chimney", "porch", "attic", "cellar", "balcony", "happy", "angry", "brave", "calm",
    "curious", "eager", "fancy", "gentle", "honest", "jolly", "kind", "lazy", "lucky", "nervous", "polite",
    "silly", "sleepy", "tidy", "jump", "swim", "climb", "wash", "fold", "sweep", "knit", "oxygen", "carbon",
    "iron", "zinc", "nickel", "cobalt", "neon", "helium", "planet", "comet", "galaxy", "meteor", "asteroid",
    "orbit", "doll", "kite", "yoyo", "robot", "puppet", "sugar", "salt", "flour", "vinegar", "mustard",
    "ketchup", "syrup", "cinnamon", "nutmeg", "vanilla", "cocoa", "coffee", "juice", "milk", "blossom",
    "tulip", "daisy", "lily", "orchid", "rose", "poppy", "cactus", "fern", "moss", "maple", "pine", "willow",
    "birch", "cedar", "bamboo", "acorn", "motor", "valve", "pulley", "gear", "wheel", "axle", "piston",
    "cradle", "crib", "hammock", "quilt", "duvet", "mattress", "pirate", "wizard", "knight", "dragon",
    "giant", "goblin", "fairy", "unicorn", "mermaid", "ghost", "tripod", "vase", "goblet", "platter", "ladle",
    "whisk", "skillet", "spatula", "colander", "grater", "barrel", "crate", "parcel", "package", "bundle",
    "sack", "pouch", "satchel", "parade", "festival", "carnival", "concert", "picnic", "banquet", "wedding",
    "birthday", "holiday", "hockey", "tennis", "soccer", "rugby", "golf", "chess", "poker", "bingo",
    "lantern", "torch", "beacon", "flashlight", "narwhal", "dolphin", "starfish", "oyster", "clam", "shrimp",
    "crab", "kiwi", "papaya", "guava", "lychee", "apricot", "coconut", "date", "hoodie", "poncho", "apron",
    "tuxedo", "kimono",
};

}  // namespace

const std::vector<std::string>& vocabulary() {
  static const std::vector<std::string> words(std::begin(kWords), std::end(kWords));
  return words;
}

std::vector<std::string> draw_words(Rng& rng, size_t n) {
  const auto& words = vocabulary();
  std::vector<size_t> order(words.size());
  std::iota(order.begin(), order.end(), 0);
  std::vector<std::string> drawn;
  for (size_t i = 0; i < n && i < order.size(); ++i) {
    std::swap(order[i], order[i + rng.below(order.size() - i)]);  // partial Fisher-Yates
    drawn.push_back(words[order[i]]);
  }
  return drawn;
}

std::string seven_digit_number(Rng& rng) { return std::to_string(1000000 + rng.below(9000000)); }

std::string uuid(Rng& rng) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 32; ++i) {
    if (i == 8 || i == 12 || i == 16 || i == 20) out += '-';
    if (i == 12) out += '4';  // version nibble
    else if (i == 16) out += hex[8 + rng.below(4)];  // variant bits 10xx
    else out += hex[rng.below(16)];
  }
  return out;
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

int count_occurrences(std::string_view text, std::string_view needle) {
  if (needle.empty()) return 0;
  const std::string haystack = lower(text), wanted = lower(needle);
  int found = 0;
  for (size_t at = haystack.find(wanted); at != std::string::npos; at = haystack.find(wanted, at + wanted.size())) ++found;
  return found;
}

std::string join_and(const std::vector<std::string>& items) {
  std::string out;
  for (size_t k = 0; k < items.size(); ++k) {
    out += (k == 0 ? "" : (k + 1 == items.size() ? " and " : ", ")) + items[k];
  }
  return out;
}

int answer_token_budget(const TokenCounter& count, const std::vector<std::string>& references) {
  std::string listed;
  for (const auto& reference : references) listed += (listed.empty() ? "" : ", ") + reference;
  return count(listed) + 3 * static_cast<int>(references.size()) + 8;
}

int largest_fitting(int lo, int hi, int target, const std::function<int(int)>& tokens) {
  if (tokens(lo) > target) return lo - 1;
  if (tokens(hi) <= target) return hi;
  int good = lo, bad = hi;  // tokens(good) <= target < tokens(bad)
  while (bad - good > 1) {
    const int mid = good + (bad - good) / 2;
    (tokens(mid) <= target ? good : bad) = mid;
  }
  return good;
}

FittedContext fit_needles_in_filler(FillerStyle style, Rng& rng, const TokenCounter& count, const std::string& header,
                                    const std::vector<std::string>& needles, const std::vector<double>& depths,
                                    int target, const std::string& where) {
  int fixed = count(header);
  for (const auto& needle : needles) fixed += count(" " + needle);
  auto too_short = [&] {
    return UsageError(where + ": a context of " + std::to_string(target) + " tokens cannot hold the header and " +
                      std::to_string(needles.size()) + " inserted statement(s) (" + std::to_string(fixed) +
                      " tokens) with filler around them; use a longer length or fewer statements");
  };
  if (fixed + 8 > target) throw too_short();
  // place_needles positions needles by the haystack's own sentence counts; its `count` only fills
  // the measured fields, which are not used here (the whole text is measured below), so a
  // candidate is assembled without counting once per needle.
  const TokenCounter no_count = [](std::string_view) { return 0; };
  auto assemble = [&](const Haystack& h) { return header + place_needles(h, needles, depths, no_count).text; };
  // Sentences are measured alone, which can differ from their share of the whole text (a
  // SentencePiece dummy prefix per sentence), so the haystack is built long enough to overflow
  // and then cut by measuring the whole text. build_haystack draws sentence after sentence, so a
  // longer build starts with the same sentences.
  const Rng start = rng;
  rng.next();
  Haystack all;
  for (int budget = 2 * target; budget <= 16 * target; budget *= 2) {
    Rng copy = start;
    all = build_haystack(style, copy, count, budget);
    if (count(assemble(all)) > target) break;
  }
  // The first `k` sentences and the first `words` words of the rest.
  const auto first = [&](int k, int words) {
    Haystack h;
    h.sentences.assign(all.sentences.begin(), all.sentences.begin() + k);
    h.tokens.assign(all.tokens.begin(), all.tokens.begin() + k);
    if (words > 0) {
      std::string part;
      int taken = 0;
      for (size_t s = k; s < all.sentences.size() && taken < words; ++s) {
        for (const auto& word : split_words(all.sentences[s])) {
          if (taken == words) break;
          part += " " + word;
          ++taken;
        }
      }
      h.sentences.push_back(part);
      h.tokens.push_back(count(part));
    }
    return h;
  };
  const int sentences = largest_fitting(1, static_cast<int>(all.sentences.size()), target,
                                        [&](int k) { return count(assemble(first(k, 0))); });
  if (sentences < 1) throw too_short();
  // Below a sentence: words of the next two sentences (the gap is less than one, measured whole).
  int spare_words = 0;
  for (size_t s = sentences; s < all.sentences.size() && s < static_cast<size_t>(sentences) + 2; ++s) {
    spare_words += static_cast<int>(split_words(all.sentences[s]).size());
  }
  const int words = largest_fitting(0, spare_words, target, [&](int w) { return count(assemble(first(sentences, w))); });

  FittedContext fitted;
  fitted.text = assemble(first(sentences, words));
  fitted.tokens = count(fitted.text);
  for (const auto& needle : needles) {
    // Needles are distinct and none contains another, so find() locates each one; the offset
    // counts the text before it (without the joining space), as place_needles does.
    size_t at = fitted.text.find(needle);
    size_t end = at > 0 && fitted.text[at - 1] == ' ' ? at - 1 : at;
    fitted.needle_offsets.push_back(count(std::string_view(fitted.text).substr(0, end)));
  }
  return fitted;
}

}  // namespace kvevict::evals::ruler
