// A set of half-open ranges [lo, hi) of unsigned keys (stream offsets), kept as maximal runs:
// ranges that overlap or touch are merged. One insert costs O(log n) plus the ranges it
// absorbs. It holds only extents; a user that keeps the octets too stores the parts an insert
// reports as new (TCP reassembly, the MPA segment receiver, replay's stream rebuilding), so the
// first copy of an octet wins, as a TCP receiver keeps it (RFC 793 §3.9, "segment arrives").
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <iterator>
#include <map>
#include <optional>

namespace iwarp {

template <std::unsigned_integral Key>
class IntervalSet {
 public:
  struct Range {
    Key lo{}, hi{};
    friend bool operator==(const Range&, const Range&) = default;
  };
  // The runs, lo -> hi, in order; none overlap or touch.
  using Map = std::map<Key, Key>;
  using const_iterator = typename Map::const_iterator;

  // Adds [lo, hi). Calls on_new(a, b) for each part of it no range covered before and
  // on_covered(a, b) for each part some range already covered, both in order, before it
  // changes the set. Returns how many existing runs it reached (overlapping or touching): they
  // become one run with [lo, hi).
  template <class OnNew, class OnCovered>
  std::size_t insert(Key lo, Key hi, OnNew&& on_new, OnCovered&& on_covered) {
    if (lo >= hi) return 0;
    auto first = runs_.upper_bound(lo);
    if (first != runs_.begin() && std::prev(first)->second >= lo) --first;
    Key pos = lo;  // [lo, pos) is reported
    Key begin = lo, end = hi;
    std::size_t reached = 0;
    Key absorbed = 0;  // keys of the runs reached
    auto it = first;
    for (; it != runs_.end() && it->first <= hi; ++it) {
      ++reached;
      const Key rs = it->first, re = it->second;
      absorbed += re - rs;
      if (rs > pos) on_new(pos, rs);
      const Key cs = std::max(rs, lo), ce = std::min(re, hi);
      if (ce > cs) on_covered(cs, ce);
      pos = std::max(pos, re);
      begin = std::min(begin, rs);
      end = std::max(end, re);
    }
    if (pos < hi) on_new(pos, hi);
    covered_ += (end - begin) - absorbed;
    it = runs_.erase(first, it);
    runs_.emplace_hint(it, begin, end);
    return reached;
  }
  std::size_t insert(Key lo, Key hi) {
    return insert(
        lo, hi, [](Key, Key) {}, [](Key, Key) {});
  }

  // Removes the first run.
  void pop_front() {
    covered_ -= runs_.begin()->second - runs_.begin()->first;
    runs_.erase(runs_.begin());
  }
  void clear() {
    runs_.clear();
    covered_ = 0;
  }

  bool empty() const { return runs_.empty(); }
  std::size_t size() const { return runs_.size(); }  // number of runs
  Key covered() const { return covered_; }           // keys in all runs
  Range front() const { return {runs_.begin()->first, runs_.begin()->second}; }
  const_iterator begin() const { return runs_.begin(); }
  const_iterator end() const { return runs_.end(); }
  // The first run that starts after `k`.
  const_iterator upper_bound(Key k) const { return runs_.upper_bound(k); }

  // The run holding `k` (lo <= k < hi), if any.
  std::optional<Range> find(Key k) const {
    auto it = runs_.upper_bound(k);
    if (it == runs_.begin()) return std::nullopt;
    --it;
    if (k >= it->second) return std::nullopt;
    return Range{it->first, it->second};
  }
  bool contains(Key lo, Key hi) const {
    if (lo >= hi) return true;
    const auto r = find(lo);
    return r && hi <= r->hi;
  }
  // How far the keys from `k` on are covered without a gap (`k` when `k` is not covered).
  Key covered_up_to(Key k) const {
    const auto r = find(k);
    return r ? r->hi : k;
  }
  // The first gap at or after `k` that some run follows: [from, to) with no key covered.
  std::optional<Range> first_gap(Key k) const {
    const Key from = covered_up_to(k);
    const auto it = runs_.upper_bound(from);
    if (it == runs_.end()) return std::nullopt;
    return Range{from, it->first};
  }

 private:
  Map runs_;
  Key covered_ = 0;
};

}  // namespace iwarp
