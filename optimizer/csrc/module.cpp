// Python bindings of the search core (nanobind). Graphs cross the boundary as
// plain lists: nodes (type, attr, salt, [(node, output), ...]) in topological
// order and outputs [(node, output), ...].
#include <nanobind/nanobind.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unordered_set.h>
#include <nanobind/stl/vector.h>

#include "core.h"

namespace nb = nanobind;
using namespace taso;

namespace {

using RefT = std::pair<int, int>;
using NodeT = std::tuple<int, int, int64_t, std::vector<RefT>>;
using PNodeT = std::pair<int, std::vector<RefT>>;

std::vector<Ref> to_refs(const std::vector<RefT>& v) {
    std::vector<Ref> out;
    for (const auto& [n, i] : v) out.push_back(Ref{n, i});
    return out;
}

std::vector<RefT> from_refs(const std::vector<Ref>& v) {
    std::vector<RefT> out;
    for (const Ref& r : v) out.push_back({r.node, r.idx});
    return out;
}

std::vector<PNode> to_pnodes(const std::vector<PNodeT>& side) {
    std::vector<PNode> out;
    for (const auto& [t, ins] : side) out.push_back(PNode{t, to_refs(ins)});
    return out;
}

std::vector<NodeT> graph_nodes(const Graph& g) {
    std::vector<NodeT> out;
    for (const Node& n : g.nodes) out.emplace_back(n.type, n.attr, n.salt, from_refs(n.in));
    return out;
}

}  // namespace

NB_MODULE(_search, m) {
    m.doc() = "taso search core: graph store, hashing, rule matching and the cost-based search";
    m.def("version", []() { return 2; });

    nb::class_<Graph>(m, "Graph")
        .def_ro("cost", &Graph::cost)
        .def_ro("hash", &Graph::hash)
        .def_ro("num_ops", &Graph::num_ops)
        .def_ro("const_bytes", &Graph::const_bytes)
        .def_prop_ro("nodes", &graph_nodes)
        .def_prop_ro("outputs", [](const Graph& g) { return from_refs(g.outputs); })
        .def_prop_ro("shapes", [](const Graph& g) {
            std::vector<std::vector<int>> out;
            for (const Node& n : g.nodes) out.push_back(n.out);
            return out;
        })
        .def_prop_ro("weight_only", [](const Graph& g) {
            std::vector<bool> out;
            for (const Node& n : g.nodes) out.push_back(n.wonly);
            return out;
        });

    nb::class_<Core>(m, "Core")
        .def(
            "__init__",
            [](Core* self, std::vector<int> kinds, nb::callable infer, nb::callable check,
               nb::callable filter, std::vector<bool> commutative) {
                Oracle::InferFn inf = [infer](int type, int attr, const std::vector<int>& shapes)
                    -> std::optional<std::pair<std::vector<int>, double>> {
                    nb::object r = infer(type, attr, shapes);
                    if (r.is_none()) return std::nullopt;
                    return nb::cast<std::pair<std::vector<int>, double>>(r);
                };
                Oracle::CheckFn chk = [check](int rule, const std::vector<int>& attrs,
                                              const std::vector<std::vector<int>>& outs,
                                              const std::vector<int>& vshapes,
                                              const std::vector<int>& vw)
                    -> std::optional<std::vector<int>> {
                    nb::object r = check(rule, attrs, outs, vshapes, vw);
                    if (r.is_none()) return std::nullopt;
                    return nb::cast<std::vector<int>>(r);
                };
                Oracle::FilterFn flt = [filter](int rule, int pnode, int attr,
                                                const std::vector<int>& shapes) {
                    return nb::cast<bool>(filter(rule, pnode, attr, shapes));
                };
                new (self) Core(std::move(kinds), std::move(inf), std::move(chk), std::move(flt),
                                std::vector<char>(commutative.begin(), commutative.end()));
            },
            nb::arg("kinds"), nb::arg("infer"), nb::arg("check"), nb::arg("filter"),
            nb::arg("commutative") = std::vector<bool>{},
            "kinds: the Kind of each type id; infer(type, attr, in_shapes) -> (out_shapes, "
            "cost) | None; check(rule, attrs, out_shapes, var_shapes, var_weight_only) -> "
            "target attr ids | None; filter(rule, pnode, attr, in_shapes) -> bool; "
            "commutative: per type id, whether its two operands may be swapped")
        .def(
            "add_rule",
            [](Core& c, int nvars, const std::vector<PNodeT>& src, const std::vector<PNodeT>& dst,
               const std::vector<std::pair<RefT, RefT>>& outputs,
               const std::vector<std::pair<std::vector<int>, std::vector<int>>>& symmetries,
               const std::vector<int>& filters) {
                Rule r;
                for (const auto& [nodes, vars] : symmetries) {
                    if (nodes.size() != src.size() || static_cast<int>(vars.size()) != nvars)
                        throw std::invalid_argument("a symmetry must permute all pnodes and vars");
                    r.symmetries.push_back({nodes, vars});
                }
                r.nvars = nvars;
                r.src = to_pnodes(src);
                r.dst = to_pnodes(dst);
                if (!filters.empty()) {
                    if (filters.size() != r.src.size())
                        throw std::invalid_argument("one filter class per source pnode");
                    for (size_t p = 0; p < filters.size(); ++p) r.src[p].filter = filters[p];
                }
                for (const auto& [s, d] : outputs)
                    r.outputs.push_back({Ref{s.first, s.second}, Ref{d.first, d.second}});
                return c.add_rule(std::move(r));
            },
            nb::arg("nvars"), nb::arg("src"), nb::arg("dst"), nb::arg("outputs"),
            nb::arg("symmetries") = std::vector<std::pair<std::vector<int>, std::vector<int>>>{},
            nb::arg("filters") = std::vector<int>{},
            "Pattern inputs are (node, output): node >= 0 an earlier node of the side, "
            "node < 0 the variable -1 - node. filters: a filter class per source pnode "
            "(pnodes of one class pass the filter alike; new classes numbered in order), "
            "or empty for a class each.")
        .def(
            "build",
            [](Core& c, const std::vector<NodeT>& nodes, const std::vector<RefT>& outputs) {
                std::vector<Node> raw;
                for (const auto& [t, a, s, ins] : nodes) {
                    Node n;
                    n.type = t;
                    n.attr = a;
                    n.salt = s;
                    n.in = to_refs(ins);
                    raw.push_back(std::move(n));
                }
                return c.build(std::move(raw), to_refs(outputs));
            },
            nb::arg("nodes"), nb::arg("outputs"))
        .def(
            "matches",
            [](Core& c, const Graph& g, int rule) {
                std::vector<std::pair<std::vector<int>, std::vector<RefT>>> out;
                for (const Match& m : c.matches(g, rule)) out.push_back({m.nodes, from_refs(m.vars)});
                return out;
            },
            nb::arg("graph"), nb::arg("rule"))
        .def(
            "expand",
            [](Core& c, const Graph& g, int skip, int limit,
               const std::unordered_set<uint64_t>& passed) {
                std::vector<std::tuple<int, uint64_t, Graph>> out;
                for (auto& e : c.expand(g, skip, limit, passed))
                    out.emplace_back(e.rule, e.key, std::move(e.graph));
                return out;
            },
            nb::arg("graph"), nb::arg("skip") = 0, nb::arg("limit") = -1,
            nb::arg("passed") = std::unordered_set<uint64_t>{})
        .def(
            "rewrite_at",
            [](Core& c, const Graph& g, uint64_t key) -> nb::object {
                auto t = c.rewrite_at(g, key);
                if (!t) return nb::none();
                return nb::make_tuple(t->rule, t->matched, t->targets, std::move(t->graph));
            },
            nb::arg("graph"), nb::arg("key"),
            "(rule, matched nodes of graph, the result's nodes per target pnode, the "
            "result) of the rewrite whose match key is `key` (a search's path_keys), or None")
        .def(
            "hash_checks",
            [](Core& c, const Graph& g) {
                std::vector<std::tuple<int, std::optional<uint64_t>, bool, std::optional<uint64_t>>>
                    out;
                for (const auto& h : c.hash_checks(g))
                    out.emplace_back(h.rule, h.predicted, h.cycle, h.built);
                return out;
            },
            nb::arg("graph"),
            "(rule, predicted hash | None, predicted cycle, built hash | None) per "
            "applicable match")
        .def(
            "search",
            [](Core& c, const Graph& g, int budget, double alpha, double max_ops_factor,
               double time_limit, nb::object progress, int progress_every) {
                SearchOptions opt;
                opt.budget = budget;
                opt.alpha = alpha;
                opt.max_ops_factor = max_ops_factor;
                opt.time_limit = time_limit;
                opt.progress_every = progress_every;
                if (!progress.is_none())
                    opt.progress = [progress](int e, double best, size_t queued) {
                        progress(e, best, queued);
                    };
                SearchResult r = c.search(g, opt);
                nb::dict d;
                d["best"] = nb::cast(std::move(r.best));
                d["initial_cost"] = r.initial_cost;
                d["expanded"] = r.expanded;
                d["generated"] = r.generated;
                d["applied"] = nb::cast(r.applied);
                d["path_keys"] = nb::cast(r.path_keys);
                d["seconds"] = r.seconds;
                d["stop_reason"] = stop_name(r.stop);
                return d;
            },
            nb::arg("graph"), nb::arg("budget") = 1000, nb::arg("alpha") = 1.05,
            nb::arg("max_ops_factor") = 2.0, nb::arg("time_limit") = 0.0,
            nb::arg("progress") = nb::none(), nb::arg("progress_every") = 0)
        .def_rw("byte_cost", &Core::byte_cost,
                "cost of one more byte of constants a run reads (0: not counted)")
        .def(
            "add_shape_bytes", [](Core& c, double b) { c.shape_bytes.push_back(b); },
            "the bytes of a tensor of the next shape id")
        .def(
            "set_pinned",
            [](Core& c, const std::vector<int64_t>& salts) {
                c.pinned = std::unordered_set<int64_t>(salts.begin(), salts.end());
            },
            "salts of the weights the rest of the model reads too")
        .def_prop_ro("infer_calls", [](const Core& c) { return c.oracle.infer_calls; })
        .def_prop_ro("check_calls", [](const Core& c) { return c.oracle.check_calls; })
        .def_prop_ro("counters", [](const Core& c) {
            nb::dict d;
            d["matches"] = c.n_matches;
            d["applicable"] = c.n_applicable;
            d["built"] = c.n_built;
            d["known"] = c.n_known;
            d["pushed"] = c.n_pushed;
            d["infer_calls"] = c.oracle.infer_calls;
            d["check_calls"] = c.oracle.check_calls;
            d["filter_calls"] = c.oracle.filter_calls;
            return d;
        })
        .def_prop_ro("num_rules", [](const Core& c) { return c.rules.size(); });
}
