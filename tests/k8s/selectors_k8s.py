"""selectors_k8s - Kubernetes label and field selectors for the stand-in.

parse_labels("app=web,tier in (a,b),!legacy") -> requirements, matched by
match_labels(reqs, obj); parse_fields("metadata.name=x,status.phase!=Failed")
-> [(field, op, value)], matched by match_fields(reqs, obj, getter). Parse
errors raise SelectorError, which the API server answers 400 BadRequest.
"""

import re

KEY = r"(?:[A-Za-z0-9.\-]+/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
SET_RE = re.compile(r"^\s*(%s)\s+(in|notin)\s+\(([^)]*)\)\s*$" % KEY)
CMP_RE = re.compile(r"^\s*(%s)\s*(==|!=|=)\s*(%s)\s*$" % (KEY, VALUE))
EXISTS_RE = re.compile(r"^\s*(!?)\s*(%s)\s*$" % KEY)
VALUE_RE = re.compile(r"^%s$" % VALUE)


class SelectorError(ValueError):
    pass


def bad(msg):
    return SelectorError(msg)


def split_terms(s):
    """Split at commas outside parentheses."""
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return out


def parse_labels(s):
    reqs = []
    if not s.strip():
        return reqs
    for term in split_terms(s):
        m = SET_RE.match(term)
        if m:
            vals = [v.strip() for v in m.group(3).split(",")]
            if not all(VALUE_RE.match(v) for v in vals):
                raise bad("unable to parse requirement: invalid label value in %r" % term)
            reqs.append((m.group(1), m.group(2), set(vals)))
            continue
        m = CMP_RE.match(term)
        if m:
            op = "=" if m.group(2) in ("=", "==") else "!="
            reqs.append((m.group(1), op, m.group(3)))
            continue
        m = EXISTS_RE.match(term)
        if m:
            reqs.append((m.group(2), "!" if m.group(1) else "exists", None))
            continue
        raise bad("unable to parse requirement: found '%s', expected: in, notin, =, ==, !=, gt, lt"
                  % term.strip())
    return reqs


def match_labels(reqs, obj):
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for key, op, val in reqs:
        have = key in labels
        if op == "=" and labels.get(key) != val:
            return False
        if op == "!=" and have and labels[key] == val:
            return False
        if op == "in" and (not have or labels[key] not in val):
            return False
        if op == "notin" and have and labels[key] in val:
            return False
        if op == "exists" and not have:
            return False
        if op == "!" and have:
            return False
    return True


def parse_fields(s):
    reqs = []
    if not s.strip():
        return reqs
    for term in s.split(","):
        for op in ("==", "!=", "="):
            if op in term:
                f, _, v = term.partition(op)
                reqs.append((f.strip(), "!=" if op == "!=" else "=", v.strip()))
                break
        else:
            raise bad("invalid selector: '%s'; can't understand '%s'" % (s, term))
    return reqs


def match_fields(reqs, obj, getter):
    for f, op, v in reqs:
        have = getter(obj, f)
        if (op == "=") != (have == v):
            return False
    return True
