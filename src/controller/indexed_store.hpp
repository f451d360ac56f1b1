// The one watch cache every kind of ClusterCache is made of (issue 24), after client-go's
// indexer and controller-runtime's IndexField: a map from key to the facts a kind keeps, named
// secondary indexes kept current on every apply and remove, and three hooks per kind:
//   extract:   the facts of an object, or nullopt when it is not ours (the key then counts as
//              deleted, as a pod whose label was removed does);
//   unchanged: the cached facts stand (nothing NICo reads changed, or the event is older): no
//              copy, no index work, no hook;
//   on_change: (old, now) after the map and the indexes took the change (old null: added; now
//              null: removed), where a kind marks Dirty and keeps any state of its own.
// Memory per object is the map's node (key and facts) and one pointer per index value: an index
// holds pointers to the map's entries (stable in an unordered_map), ordered by key, so that
// by_index answers in key order as the hand-written maps of keys did.
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "controller/cache_store.hpp"

namespace extsvc::controller {

template <class Facts>
class IndexedStore : public ClusterCache::Store {
 public:
  using Map = std::unordered_map<std::string, Facts>;
  using Entry = typename Map::value_type;
  // One index's values for an object's facts (none: the object is not in that index).
  using IndexFn = std::function<std::vector<std::string>(const Facts&)>;

  using Store::Store;

  size_t size() const override { return map_.size(); }
  const Map& items() const { return map_; }
  const Facts* get(const std::string& key) const {
    auto it = map_.find(key);
    return it == map_.end() ? nullptr : &it->second;
  }

  // Adds a named index (a kind does it in its constructor; objects already held are indexed).
  void add_index(std::string name, IndexFn fn) {
    indexes_.push_back(Index{std::move(name), std::move(fn), {}});
    for (const Entry& e : map_) index_one(indexes_.back(), e);
  }
  // The facts whose index `name` has `value`, in key order (client-go's ByIndex).
  std::vector<const Facts*> by_index(const std::string& name, const std::string& value) const {
    std::vector<const Facts*> out;
    if (const auto* bucket = find_bucket(name, value))
      for (const Entry* e : *bucket) out.push_back(&e->second);
    return out;
  }
  // The first of them in key order, or null (an index whose values are unique: a uid).
  const Facts* first_by_index(const std::string& name, const std::string& value) const {
    const auto* bucket = find_bucket(name, value);
    return bucket == nullptr ? nullptr : &(*bucket->begin())->second;
  }
  // Their keys, in key order (client-go's IndexKeys).
  std::vector<std::string> index_keys(const std::string& name, const std::string& value) const {
    std::vector<std::string> out;
    if (const auto* bucket = find_bucket(name, value))
      for (const Entry* e : *bucket) out.push_back(e->first);
    return out;
  }
  size_t index_count(const std::string& name, const std::string& value) const {
    const auto* bucket = find_bucket(name, value);
    return bucket == nullptr ? 0 : bucket->size();
  }
  // The values an index holds (which Nodes have pods, ...), for tests and figures.
  size_t index_size(const std::string& name) const { return index_named(name).buckets.size(); }

 protected:
  virtual std::optional<Facts> extract(const std::string& key, const nlohmann::json& obj) = 0;
  virtual bool unchanged(const Facts& old, const Facts& now) const { return old == now; }
  virtual void on_change(const std::string& key, const Facts* old, const Facts* now) = 0;

  void apply(const nlohmann::json& obj) final {
    std::string key = key_of(obj);
    std::optional<Facts> now = extract(key, obj);
    if (!now) {
      remove(key);
      return;
    }
    auto it = map_.find(key);
    if (it == map_.end()) {
      it = map_.emplace(std::move(key), std::move(*now)).first;
      index_all(*it);
      on_change(it->first, nullptr, &it->second);
      return;
    }
    if (unchanged(it->second, *now)) return;
    unindex_all(*it);
    Facts old = std::exchange(it->second, std::move(*now));
    index_all(*it);
    on_change(it->first, &old, &it->second);
  }

  void remove(const std::string& key) final {
    auto it = map_.find(key);
    if (it == map_.end()) return;
    unindex_all(*it);
    auto gone = map_.extract(it);  // the hook still reads the key and the facts
    on_change(gone.key(), &gone.mapped(), nullptr);
  }

  std::vector<std::string> keys() const final {
    std::vector<std::string> out;
    out.reserve(map_.size());
    for (const auto& [key, facts] : map_) out.push_back(key);
    return out;
  }

 private:
  struct ByKey {
    bool operator()(const Entry* a, const Entry* b) const { return a->first < b->first; }
  };
  using Bucket = std::set<const Entry*, ByKey>;
  struct Index {
    std::string name;
    IndexFn values;
    std::unordered_map<std::string, Bucket> buckets;
  };

  const Index& index_named(const std::string& name) const {
    for (const Index& i : indexes_)
      if (i.name == name) return i;
    throw std::out_of_range("no index " + name + " in the " + this->name() + " cache");
  }
  const Bucket* find_bucket(const std::string& name, const std::string& value) const {
    const Index& i = index_named(name);
    auto it = i.buckets.find(value);
    return it == i.buckets.end() ? nullptr : &it->second;
  }
  static void index_one(Index& i, const Entry& e) {
    for (auto& v : i.values(e.second)) i.buckets[std::move(v)].insert(&e);
  }
  void index_all(const Entry& e) {
    for (Index& i : indexes_) index_one(i, e);
  }
  // With the facts as they were indexed: call before they change.
  void unindex_all(const Entry& e) {
    for (Index& i : indexes_)
      for (const auto& v : i.values(e.second)) {
        auto b = i.buckets.find(v);
        if (b == i.buckets.end()) continue;
        b->second.erase(&e);
        if (b->second.empty()) i.buckets.erase(b);
      }
  }

  Map map_;
  std::vector<Index> indexes_;
};

}  // namespace extsvc::controller
