# Purpose-based authorization (SPEC 5.2.5, 2.5, 2.6, 2.7; DESIGN.md "Policy").
#
# Two entry points. data.payments.authz.decision returns
#   {allow, reasons[], step_up, status, code, message, obligations, policy_version, registry_version}.
# `reasons` lists every check with its outcome: it is the explanation trace of simulate and of
# an audited denial. data.payments.authz.verdict is the same without `reasons`: what the edge
# evaluates on every Check (issue 18 item 1: the trace's formatting is not on the hot path).
# The host (edge/) verifies credentials and passes what it verified: the subject with its
# relationship tuples, roles, scopes and AAL; the tenant's settings; `context.now_ns`.
package payments.authz

import rego.v1

default public_action := false

default step_up_exempt := false

# Completing a step-up (or leaving) must never itself demand a step-up.
step_up_exempt if action in object.get(purpose, "step_up_exempt_actions", [])

default member := false

default aal_ok := false

default roles_ok := false

default subject_type_ok := false

default scope_ok := false

default consent_ok := false

default ip_allowed := false

default tenant_active := false

default resource_listed := false

default action_listed := false

default needs_step_up := false

default bound_step_up := false

default stepup_fixable := false

subject := object.get(input, "subject", {})

ctx := object.get(input, "context", {})

resource := object.get(input, "resource", {})

tenant := object.get(input, "tenant", {})

tenant_id := object.get(tenant, "id", "")

action := object.get(input, "action", "")

resource_type := object.get(resource, "type", "")

risk := object.get(ctx, "risk", "low")

client_ip := object.get(ctx, "ip", "")

purpose_name := object.get(input, "purpose", "")

aal := object.get(subject, "aal", 0)

default policy_version := "unversioned"

policy_version := data.meta.policy_version

default registry_version := "unknown"

registry_version := data.registry.version

# The request's purpose, found by a scan of the registry's list rather than an object of every
# purpose keyed by name: WASM keeps nothing between evaluations, so that object was built anew
# for each decision, most of the policy's time (issue 18 item 1: in-process profile).
purpose := p if {
	some p in data.registry.purposes
	p.name == purpose_name
}

default purpose_known := false

purpose_known if purpose

public_action if {
	some a in purpose.public_actions
	a == action
}

# --- the checks; each yields {check, ok, detail} -------------------------------------------

check_purpose := {"check": "purpose_known", "ok": purpose_known, "detail": purpose_name}

resource_tenant := object.get(resource, "tenant_id", "")

default tenant_ok := false

tenant_ok if resource_tenant == tenant_id

# Staff of a tenant manage the tenants it created (an `owner` relationship tuple
# tenant:<request tenant> → tenant:<resource tenant>, which the host passes as tenant.tuples),
# through the actions the purpose lists in `owner_actions` only.
tenant_ok if {
	action in object.get(purpose, "owner_actions", [])
	some t in object.get(tenant, "tuples", [])
	t.relation == "owner"
	t.object_ns == "tenant"
	t.object_id == resource_tenant
	tuple_live(t)
}

# SPEC 2.7 `parent` (issue 20 item 3): used only for the platform operator's read-only view of
# a tenant it owns: a live tuple tenant:<request tenant> parent tenant:<resource tenant>, for the
# actions the purpose lists in `parent_actions`, and only when the request tenant is the
# platform operator's (tenant.platform, set by the host from platform_operator).
tenant_ok if {
	action in object.get(purpose, "parent_actions", [])
	object.get(tenant, "platform", false) == true
	some t in object.get(tenant, "tuples", [])
	t.relation == "parent"
	t.object_ns == "tenant"
	t.object_id == resource_tenant
	tuple_live(t)
}

check_tenant := {"check": "resource_tenant", "ok": tenant_ok, "detail": sprintf("resource tenant %v, request tenant %v", [resource_tenant, tenant_id])}

tenant_active if object.get(tenant, "status", "ACTIVE") == "ACTIVE"

# A suspended tenant is refused everything except the actions its purpose lists in
# `suspended_actions`: its staff reading the tenant and activating it again (else nobody could).
tenant_active if action in object.get(purpose, "suspended_actions", [])

check_tenant_active := {"check": "tenant_active", "ok": tenant_active, "detail": object.get(tenant, "status", "ACTIVE")}

resource_listed if resource_type in purpose.resources

check_resource := {"check": "purpose_resource", "ok": resource_listed, "detail": resource_type}

action_listed if action in purpose.actions

check_action := {"check": "purpose_action", "ok": action_listed, "detail": action}

# SPEC 2.7: a tuple whose expires_at is set and in the past is ignored; hours and ip_ranges caveats.
tuple_live(t) if {
	not t.caveat.expires_at
	caveat_hours_ok(t)
	caveat_ip_ok(t)
}

tuple_live(t) if {
	t.caveat.expires_at == ""
	caveat_hours_ok(t)
	caveat_ip_ok(t)
}

tuple_live(t) if {
	t.caveat.expires_at != ""
	time.parse_rfc3339_ns(t.caveat.expires_at) > object.get(ctx, "now_ns", 0)
	caveat_hours_ok(t)
	caveat_ip_ok(t)
}

caveat_hours_ok(t) if not t.caveat.hours

# hours: {"from": 8, "to": 18} in the tenant-local hour the host computes (context.local_hour).
caveat_hours_ok(t) if {
	t.caveat.hours.from <= object.get(ctx, "local_hour", -1)
	object.get(ctx, "local_hour", -1) < t.caveat.hours.to
}

caveat_ip_ok(t) if not t.caveat.ip_ranges

caveat_ip_ok(t) if {
	some cidr in t.caveat.ip_ranges
	net.cidr_contains(cidr, client_ip)
}

member if {
	some t in object.get(subject, "tuples", [])
	t.relation == "member"
	t.object_ns == "tenant"
	t.object_id == tenant_id
	tuple_live(t)
}

check_member := {"check": "tenant_member", "ok": member, "detail": "relationship tuple member of the tenant"} if not public_action

check_member := {"check": "tenant_member", "ok": true, "detail": "public action: no subject required"} if public_action

aal_ok if aal >= purpose.min_aal

aal_ok if public_action

# AAL measures how a person authenticated; machine credentials are proof-of-possession keys.
aal_ok if object.get(subject, "type", "") == "service"

check_aal := {"check": "min_aal", "ok": aal_ok, "detail": sprintf("subject aal %v, purpose needs %v", [aal, object.get(purpose, "min_aal", 0)])}

# Staff purposes name the roles that may use them; some operational actions name their own.
needed_roles := purpose.required_roles

needed_roles := purpose.role_actions[action] if not purpose.required_roles

roles_ok if not needed_roles

roles_ok if {
	some r in needed_roles
	r in object.get(subject, "roles", [])
}

check_roles := {"check": "roles", "ok": roles_ok, "detail": object.get(purpose, "required_roles", object.get(object.get(purpose, "role_actions", {}), action, []))}

subject_type_ok if not purpose.subject_types

subject_type_ok if object.get(subject, "type", "anonymous") in purpose.subject_types

subject_type_ok if public_action

check_subject_type := {"check": "subject_type", "ok": subject_type_ok, "detail": object.get(subject, "type", "anonymous")}

# Machine clients: the action's scope must be granted (core:write implies core:read).
scope_needed := purpose.action_scopes[action]

scope_ok if not purpose.action_scopes[action]

# Scopes are what machine credentials carry; people are governed by roles and AAL instead.
scope_ok if object.get(subject, "type", "") != "service"

scope_ok if scope_needed in object.get(subject, "scopes", [])

scope_ok if {
	scope_needed == "core:read"
	"core:write" in object.get(subject, "scopes", [])
}

check_scope := {"check": "scope", "ok": scope_ok, "detail": object.get(object.get(purpose, "action_scopes", {}), action, "none")}

consent_ok if not purpose.consent_required

consent_ok if purpose_name in object.get(subject, "consents", [])

# SPEC 2.7 `payer` (issue 20 item 3): money moved for another customer (resource.attrs.payer_for,
# set by the host) needs a live tuple customer:<subject> payer customer:<payer_for>, for the
# actions the purpose lists in `payer_actions`. The delegation waives nothing: the step-up rules
# read the subject's own AAL and request-bound step-up, and core applies the payer's own limits.
payer_for := object.get(object.get(resource, "attrs", {}), "payer_for", "")

default payer_ok := false

payer_ok if payer_for == ""

payer_ok if payer_for == object.get(subject, "id", "")

payer_ok if {
	payer_for != ""
	action in object.get(purpose, "payer_actions", [])
	some t in object.get(subject, "tuples", [])
	t.relation == "payer"
	t.object_ns == "customer"
	t.object_id == payer_for
	tuple_live(t)
}

check_payer := {"check": "delegated_payer", "ok": payer_ok, "detail": payer_for}

check_consent := {"check": "consent", "ok": consent_ok, "detail": object.get(purpose, "consent_required", false)}

# SPEC 2.10 allowed_ip_ranges: when set, the source address must be inside one of them.
tenant_ranges := object.get(object.get(tenant, "security", {}), "allowed_ip_ranges", [])

ip_allowed if count(tenant_ranges) == 0

ip_allowed if {
	some cidr in tenant_ranges
	net.cidr_contains(cidr, client_ip)
}

check_ip := {"check": "tenant_ip_ranges", "ok": ip_allowed, "detail": client_ip}

# --- step-up (SPEC 5.2.5, 4.3 rule 2) -------------------------------------------------------

# customer.transact always needs AAL 2; high risk needs a step-up for every purpose, and only
# a step-up made for this very request (the host sets subject.stepup_bound) satisfies it.
needs_step_up if {
	not public_action
	object.get(subject, "type", "") != "service"
	purpose_name == "customer.transact"
	aal < 2
}

needs_step_up if {
	not public_action
	not step_up_exempt
	risk == "high"
	not bound_step_up
}

needs_step_up if {
	not public_action
	not step_up_exempt
	object.get(object.get(tenant, "security", {}), "mfa_required_for_all_users", false) == true
	object.get(subject, "type", "") == "customer"
	aal < 2
}

# Issue 13 items 1-2 (SPEC 4.3 rule 2 generalised): an action that moves money or changes who
# or what can authorise it (the purpose's `request_bound_actions`: transfer create, payee add
# and remove, device registration and removal, revoking another session) needs a step-up made
# for this very request and not yet used up by another committed action; the host says whether
# the request carries one (subject.stepup_bound). Machine clients are governed by scopes.
needs_step_up if {
	not public_action
	request_bound
	not request_bound_exempt
	object.get(subject, "type", "") != "service"
	not bound_step_up
}

# Issue 16 item 2 (issue 14 item 5): staff PEOPLE need a fresh second factor bound to the
# action for the sensitive administration actions the purpose lists in `staff_aal2_actions`
# (key rotation, tenant suspend/activate, revoking another session, credential issuance,
# enrolment-link re-issue) and for rotating a webhook secret: an AAL 2 token made by a step-up
# for this very request (subject.stepup_bound), as for customers' money. A session that signed
# in at AAL 2 is not enough: sign-in is not consent to this action. Service tokens are
# machines: never asked.
needs_step_up if {
	not public_action
	object.get(subject, "staff", false) == true
	staff_aal2
	not bound_step_up
}

default staff_aal2 := false

staff_aal2 if {
	action in object.get(purpose, "staff_aal2_actions", [])
	not staff_own_session
}

staff_aal2 if {
	action == "webhook.update_webhook"
	object.get(object.get(resource, "attrs", {}), "rotates_secret", false) == true
}

default staff_own_session := false

# A member ending their own current session is signing out.
staff_own_session if {
	action == "session.admin_revoke"
	object.get(object.get(resource, "attrs", {}), "current_session", false) == true
}

default request_bound := false

request_bound if action in object.get(purpose, "request_bound_actions", [])

default request_bound_exempt := false

# Ending the caller's own current session is a logout, never a step-up.
request_bound_exempt if {
	action == "session.revoke"
	object.get(object.get(resource, "attrs", {}), "current_session", false) == true
}

bound_step_up if {
	aal >= 2
	object.get(subject, "stepup_bound", false) == true
}

step_up_ok := not_bool(needs_step_up)

not_bool(b) := false if b

not_bool(b) if not b

check_step_up := {"check": "step_up", "ok": step_up_ok, "detail": sprintf("purpose %v, aal %v, risk %v", [purpose_name, aal, risk])}

# --- the decision ---------------------------------------------------------------------------

reasons := [check_purpose, check_tenant, check_tenant_active, check_resource, check_action, check_subject_type, check_member, check_payer, check_aal, check_roles, check_scope, check_consent, check_ip, check_step_up] if purpose_known

reasons := [check_purpose] if not purpose_known

# Each check's outcome alone, in the order of `reasons`: `failed` and the hot-path `verdict` are
# built from these, so deciding never formats the details (sprintf) only simulate and the audit
# of a denial read (issue 18 item 1). authz_test.rego checks they agree with `reasons`.
check_oks := [
	["purpose_known", true], ["resource_tenant", tenant_ok], ["tenant_active", tenant_active],
	["purpose_resource", resource_listed], ["purpose_action", action_listed], ["subject_type", subject_type_ok],
	["tenant_member", member_ok], ["delegated_payer", payer_ok], ["min_aal", aal_ok], ["roles", roles_ok], ["scope", scope_ok],
	["consent", consent_ok], ["tenant_ip_ranges", ip_allowed], ["step_up", step_up_ok],
] if purpose_known

check_oks := [["purpose_known", false]] if not purpose_known

default member_ok := false

member_ok if public_action

member_ok if member

failed := [c[0] | some c in check_oks; not c[1]]

# Step-up helps only when it is the one thing missing (AAL below the purpose's minimum counts).
stepup_fixable if {
	needs_step_up
	every f in failed {
		f in {"step_up", "min_aal"}
	}
}

stepup_fixable if {
	not needs_step_up
	failed == ["min_aal"]
	object.get(subject, "type", "") == "customer"
}

# A staff member below a purpose's minimum (fraud review needs AAL 2) can step up too.
stepup_fixable if {
	not needs_step_up
	failed == ["min_aal"]
	object.get(subject, "staff", false) == true
}

# SPEC 2.5 field policies become masking obligations for the response.
masking[rtype] := rule if {
	some rtype, level in purpose.field_policies
	rule := masking_rule[level]
}

masking_rule := {
	"full": {"level": "full"},
	"masked": {"level": "masked", "name": "mask", "phone": "keep_first4_last2", "card_number": "keep_suffix4"},
}

obligations := {"masking": masking, "retention_days": object.get(purpose, "retention_days", 0), "purpose": purpose_name} if purpose

obligations := {} if not purpose

verdict := {
	"allow": true,
	"status": 200,
	"code": "OK",
	"message": "allowed",
	"step_up": false,
	"obligations": obligations,
	"policy_version": policy_version,
	"registry_version": registry_version,
} if count(failed) == 0

verdict := {
	"allow": false,
	"status": 403,
	"code": "MFA_REQUIRED",
	"message": "step-up authentication required",
	"step_up": true,
	"obligations": obligations,
	"policy_version": policy_version,
	"registry_version": registry_version,
} if {
	count(failed) > 0
	stepup_fixable
}

verdict := {
	"allow": false,
	"status": 403,
	"code": "POLICY_DENIED",
	"message": sprintf("denied: %v", [concat(", ", failed)]),
	"step_up": false,
	"obligations": obligations,
	"policy_version": policy_version,
	"registry_version": registry_version,
} if {
	count(failed) > 0
	not stepup_fixable
}

# The traced decision (simulate, the audit of a denial): the verdict with every check's detail.
decision := object.union(verdict, {"reasons": reasons})
