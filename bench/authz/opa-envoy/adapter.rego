# The comparison side of bench/authz/run.ts: what opa-envoy-plugin evaluates for a CheckRequest.
#
# opa-envoy-plugin hands a policy Envoy's CheckRequest as JSON (plus parsed_path, parsed_query,
# parsed_body); our edge does the same work in TypeScript before it evaluates the WASM build of
# policy/src. To compare like with like, this package does in Rego what the edge does in code —
# route → purpose (the edge's own table, exported by the bench), bearer token verification
# (EdDSA, per-tenant JWKS, iss, aud, typ, exp, iat), session (exists, same subject, not revoked,
# not idle), tuples, tenant settings, the request-bound step-up (`orig`) — then calls the very
# same decision entry point, data.payments.authz.decision, and maps the decision to Envoy's
# answer. State comes from data.bench, which the bench writes from the same rows the edge reads:
# the plugin has no database, so what it cannot keep (risk velocity, DPoP and nonce replay, the
# decision audit) is not done here and the bench says so beside the figures.
package envoy.authz

import rego.v1

http_req := input.attributes.request.http

headers := object.get(http_req, "headers", {})

method := upper(http_req.method)

path := split(http_req.path, "?")[0]

now_ns := time.now_ns()

# --- route → purpose, resource, action (SPEC 4.3 rule 1) ------------------------------------
# data.bench.routes[method][segment count] lists the templates, most specific first; each
# segment is a literal, a whole-segment parameter, or (`{tenantId}:suspend`) a pattern.

segments := array.slice(split(path, "/"), 1, count(split(path, "/")))

candidates := object.get(object.get(data.bench.routes, method, {}), sprintf("%d", [count(segments)]), [])

segment_ok(seg, s) if seg.literal == s

segment_ok(seg, s) if {
	seg.param
	s != ""
}

segment_ok(seg, s) if regex.match(seg.pattern, s)

matching := [i |
	some i, r in candidates
	every j, seg in r.segments {
		segment_ok(seg, segments[j])
	}
]

route := candidates[matching[0]] if count(matching) > 0

route := {"purpose": "operational", "resource": "unmapped", "action": "unmapped", "credential": "public", "segments": []} if count(matching) == 0

params[name] := segments[j] if {
	some j, seg in route.segments
	name := seg.param
}

params[name] := groups[k + 1] if {
	some j, seg in route.segments
	seg.pattern
	groups := regex.find_all_string_submatch_n(seg.pattern, segments[j], 1)[0]
	some k, name in seg.params
}

# --- the bearer token ------------------------------------------------------------------------

bearer := substring(headers.authorization, 7, -1) if startswith(object.get(headers, "authorization", ""), "Bearer ")

unverified := io.jwt.decode(bearer)

token_tenant := unverified[1].tid

verified := io.jwt.decode_verify(bearer, {
	"cert": data.bench.jwks[token_tenant],
	"aud": "payments-api",
	"iss": sprintf("urn:payments:tenant:%s", [token_tenant]),
	"time": now_ns,
})

claims := verified[2] if {
	verified[0]
	unverified[0].typ == "at+jwt"
	unverified[0].alg == "EdDSA"
	verified[2].iat * 1000000000 <= now_ns + 30000000000
	is_string(verified[2].sub)
	is_string(verified[2].sid)
	is_number(verified[2].aal)
}

tenant := object.get(data.bench.tenants, token_tenant, {"status": "UNKNOWN", "security": {}})

session := data.bench.sessions[claims.sid]

session_ok if {
	session.tenant_id == token_tenant
	session.subject_id == claims.sub
	session.subject_type == "customer"
	not session.revoked
	timeout_min := object.get(tenant.security, "session_timeout_minutes", 15)
	now_ns - session.last_seen_ns <= timeout_min * 60000000000
}

authenticated if {
	route.credential == "customer"
	session_ok
}

# --- the decision input, as edge/authz.ts builds it ------------------------------------------

query_tenant := object.get(object.get(input, "parsed_query", {}), "tenantId", [])

body_tenant := object.get(object.get(input, "parsed_body", {}), "tenantId", "") if is_object(object.get(input, "parsed_body", null))

# The tenant the request names (path, then query, then JSON body), else the token's.
resource_tenant := params.tenantId if params.tenantId

else := query_tenant[0] if count(query_tenant) > 0

else := body_tenant if body_tenant != ""

else := token_tenant

# base64url(SHA-256(`METHOD|path|canonical body`)): the request a step-up was issued for.
normalized_body := json.marshal(input.parsed_body) if input.parsed_body != null

default normalized_body := ""

orig := base64url.encode_no_pad(hex.decode(crypto.sha256(sprintf("%s|%s|%s", [method, path, normalized_body]))))

request_bound_actions := {"transfer.create"}

for_this_request if claims.orig == orig

default for_this_request := false

bound if not route.action in request_bound_actions

bound if for_this_request

aal := claims.aal if bound

aal := min({claims.aal, 1}) if not bound

default stepup_bound := false

stepup_bound if {
	aal >= 2
	for_this_request
}

# The plugin hands the CheckRequest over as protojson (lowerCamelCase field names).
source_ip := input.attributes.source.address.socketAddress.address

decision_input := {
	"tenant": {"id": token_tenant, "status": tenant.status, "security": tenant.security},
	"subject": {
		"id": claims.sub, "type": "customer", "roles": [], "aal": aal, "amr": object.get(claims, "amr", []),
		"tuples": object.get(data.bench.tuples, claims.sub, []),
		"stepup_bound": stepup_bound,
	},
	"resource": {"type": route.resource, "id": object.get(params, "id", ""), "tenant_id": resource_tenant, "attrs": {}},
	"action": route.action,
	"purpose": route.purpose,
	"context": {
		"ip": source_ip, "ua": object.get(headers, "user-agent", ""),
		# Risk velocity and device history need state the plugin does not keep.
		"risk": "low",
		"time": time.format(now_ns), "now_ns": now_ns,
		"local_hour": time.clock([now_ns, object.get(tenant.security, "timezone", "UTC")])[0],
	},
}

decision := d if {
	d := data.payments.authz.decision with input as decision_input
}

# --- Envoy's answer --------------------------------------------------------------------------

default result := {
	"allowed": false,
	"http_status": 401,
	"headers": {"www-authenticate": "Bearer error=\"invalid_token\""},
	"body": "{\"code\":\"UNAUTHENTICATED\",\"message\":\"missing or invalid credentials\"}",
}

result := {
	"allowed": true,
	"headers": {
		"x-tenant-id": token_tenant, "x-principal-id": claims.sub, "x-session-id": claims.sid,
		"x-purpose": route.purpose, "x-aal": sprintf("%d", [aal]), "x-client-ip": source_ip,
		"x-masking": json.marshal(object.get(decision.obligations, "masking", {})),
	},
	"request_headers_to_remove": ["x-tenant-id", "x-principal-id", "x-session-id", "x-purpose", "x-aal", "x-client-ip", "x-masking"],
} if {
	authenticated
	decision.allow
}

result := {
	"allowed": false,
	"http_status": decision.status,
	"headers": {"content-type": "application/json"},
	"body": json.marshal({"code": decision.code, "message": object.get(decision, "message", "")}),
} if {
	authenticated
	not decision.allow
}
