package payments.authz_test

import data.payments.authz
import rego.v1

now_ns := 1800000000000000000

member := {"relation": "member", "object_ns": "tenant", "object_id": "t1", "caveat": {}}

customer(level) := {"id": "c1", "type": "customer", "aal": level, "tuples": [member], "stepup_bound": bound(level)}

bound(level) if level >= 2

default bound(_) := false

base := {
	"tenant": {"id": "t1", "status": "ACTIVE", "security": {}},
	"subject": customer(1),
	"resource": {"type": "account", "tenant_id": "t1"},
	"action": "account.read",
	"purpose": "customer.account.view",
	"context": {"ip": "10.1.2.3", "risk": "low", "now_ns": now_ns, "local_hour": 10},
}

transfer := object.union(base, {"subject": customer(1), "resource": {"type": "transaction", "tenant_id": "t1"}, "action": "transfer.create", "purpose": "customer.transact"})

failed(d) := {r.check | some r in d.reasons; not r.ok}

test_account_view_allowed_with_masking if {
	d := authz.decision with input as base
	d.allow
	d.status == 200
	d.obligations.masking.account.level == "masked"
	d.obligations.masking.transaction.phone == "keep_first4_last2"
	d.obligations.masking.transaction.card_number == "keep_suffix4"
	d.registry_version == data.registry.version
	count(d.reasons) == 14
}

test_cross_tenant_resource_denied if {
	d := authz.decision with input as object.union(base, {"resource": {"type": "account", "tenant_id": "t2"}})
	not d.allow
	d.code == "POLICY_DENIED"
	failed(d) == {"resource_tenant"}
}

test_resource_not_in_purpose_denied if {
	d := authz.decision with input as object.union(base, {"resource": {"type": "posting", "tenant_id": "t1"}})
	failed(d) == {"purpose_resource"}
}

test_action_not_in_purpose_denied if {
	d := authz.decision with input as object.union(base, {"action": "transfer.create"})
	failed(d) == {"purpose_action"}
}

test_unknown_purpose_denied if {
	d := authz.decision with input as object.union(base, {"purpose": "made.up"})
	not d.allow
	failed(d) == {"purpose_known"}
}

test_non_member_denied if {
	d := authz.decision with input as object.union(base, {"subject": object.union(customer(1), {"tuples": []})})
	failed(d) == {"tenant_member"}
}

test_member_of_other_tenant_denied if {
	t := object.union(member, {"object_id": "t2"})
	d := authz.decision with input as object.union(base, {"subject": object.union(customer(1), {"tuples": [t]})})
	failed(d) == {"tenant_member"}
}

with_caveat(c) := object.union(base, {"subject": object.union(customer(1), {"tuples": [object.union(member, {"caveat": c})]})})

test_expired_tuple_ignored if {
	d := authz.decision with input as with_caveat({"expires_at": "2020-01-01T00:00:00Z"})
	failed(d) == {"tenant_member"}
}

test_unexpired_tuple_counts if {
	d := authz.decision with input as with_caveat({"expires_at": "2099-01-01T00:00:00Z"})
	d.allow
}

test_empty_expiry_counts if {
	d := authz.decision with input as with_caveat({"expires_at": ""})
	d.allow
}

test_ip_ranges_caveat if {
	inside := authz.decision with input as with_caveat({"ip_ranges": ["10.0.0.0/8"]})
	inside.allow
	outside := authz.decision with input as with_caveat({"ip_ranges": ["192.168.0.0/16"]})
	failed(outside) == {"tenant_member"}
}

test_hours_caveat if {
	inside := authz.decision with input as with_caveat({"hours": {"from": 8, "to": 18}})
	inside.allow
	outside := authz.decision with input as with_caveat({"hours": {"from": 20, "to": 23}})
	failed(outside) == {"tenant_member"}
}

test_transact_needs_aal2 if {
	d := authz.decision with input as transfer
	not d.allow
	d.step_up
	d.code == "MFA_REQUIRED"
	failed(d) == {"min_aal", "step_up"}
}

test_transact_allowed_at_aal2 if {
	d := authz.decision with input as object.union(transfer, {"subject": customer(2)})
	d.allow
	d.obligations.masking.transaction.level == "full"
	d.obligations.masking.beneficiary.level == "masked"
}

test_high_risk_needs_step_up_for_any_purpose if {
	d := authz.decision with input as object.union(base, {"context": object.union(base.context, {"risk": "high"})})
	d.code == "MFA_REQUIRED"
	failed(d) == {"step_up"}
}

test_high_risk_allowed_after_a_step_up_for_this_request if {
	d := authz.decision with input as object.union(base, {"subject": customer(2), "context": object.union(base.context, {"risk": "high"})})
	d.allow
}

test_high_risk_step_up_for_another_request_needs_another if {
	s := object.union(customer(2), {"stepup_bound": false})
	d := authz.decision with input as object.union(transfer, {"subject": s, "context": object.union(base.context, {"risk": "high"})})
	d.code == "MFA_REQUIRED"
}

test_step_up_not_offered_when_other_checks_fail if {
	d := authz.decision with input as object.union(transfer, {"resource": {"type": "transaction", "tenant_id": "t2"}})
	d.code == "POLICY_DENIED"
	not d.step_up
}

test_mfa_required_for_all_users if {
	t := object.union(base.tenant, {"security": {"mfa_required_for_all_users": true}})
	d := authz.decision with input as object.union(base, {"tenant": t})
	d.code == "MFA_REQUIRED"
}

test_suspended_tenant_denied if {
	d := authz.decision with input as object.union(base, {"tenant": object.union(base.tenant, {"status": "SUSPENDED"})})
	failed(d) == {"tenant_active"}
}

test_tenant_allowed_ip_ranges if {
	t := object.union(base.tenant, {"security": {"allowed_ip_ranges": ["192.168.0.0/16"]}})
	d := authz.decision with input as object.union(base, {"tenant": t})
	failed(d) == {"tenant_ip_ranges"}
	t2 := object.union(base.tenant, {"security": {"allowed_ip_ranges": ["10.1.0.0/16"]}})
	ok := authz.decision with input as object.union(base, {"tenant": t2})
	ok.allow
}

staff(roles, level) := {"id": "u1", "type": "user", "aal": level, "roles": roles, "tuples": [member]}

fraud_read := object.union(base, {"purpose": "fraud.review", "resource": {"type": "transaction", "tenant_id": "t1"}, "action": "transaction.read"})

test_fraud_review_requires_role_and_aal2 if {
	ok := authz.decision with input as object.union(fraud_read, {"subject": staff(["fraud"], 2)})
	ok.allow
	ok.obligations.masking.transaction.level == "full"
	no_role := authz.decision with input as object.union(fraud_read, {"subject": staff(["support"], 2)})
	failed(no_role) == {"roles"}
	low := authz.decision with input as object.union(fraud_read, {"subject": staff(["fraud"], 1)})
	failed(low) == {"min_aal"}
	low.code == "POLICY_DENIED"
}

test_support_sees_masked_and_customers_cannot_use_it if {
	req := object.union(base, {"purpose": "support.investigate", "resource": {"type": "customer", "tenant_id": "t1"}, "action": "customer.read"})
	d := authz.decision with input as object.union(req, {"subject": staff(["support"], 1)})
	d.allow
	d.obligations.masking.customer.name == "mask"
	c := authz.decision with input as req
	failed(c) == {"subject_type", "roles"}
}

test_compliance_kyc_gated if {
	req := object.union(base, {"purpose": "compliance.kyc", "resource": {"type": "kyc_customer", "tenant_id": "t1"}, "action": "kyc.read"})
	ok := authz.decision with input as object.union(req, {"subject": staff(["compliance"], 2)})
	ok.allow
	no := authz.decision with input as object.union(req, {"subject": staff(["support"], 2)})
	not no.allow
}

# The full KYC record (kyc.review) is compliance's alone; agents keep the KYC work they do at a
# desk (register, upgrade, re-KYC, status) under the same purpose.
test_compliance_kyc_review_is_compliance_only if {
	req := object.union(base, {"purpose": "compliance.kyc", "resource": {"type": "kyc_customer", "tenant_id": "t1"}, "action": "kyc.review"})
	ok := authz.decision with input as object.union(req, {"subject": staff(["compliance"], 2)})
	ok.allow
	agent := authz.decision with input as object.union(req, {"subject": staff(["agent"], 2)})
	failed(agent) == {"roles"}
	status := authz.decision with input as object.union(req, {"action": "kyc.read", "subject": staff(["agent"], 2)})
	status.allow
}

test_analytics_aggregates_only if {
	req := object.union(base, {"purpose": "analytics.aggregate", "subject": staff(["analyst"], 1)})
	agg := authz.decision with input as object.union(req, {"resource": {"type": "aggregate", "tenant_id": "t1"}, "action": "aggregate.read"})
	agg.allow
	raw := authz.decision with input as object.union(req, {"resource": {"type": "transaction", "tenant_id": "t1"}, "action": "transaction.read"})
	failed(raw) == {"purpose_resource", "purpose_action"}
}

test_marketing_needs_consent if {
	req := object.union(base, {"purpose": "marketing.personalize", "resource": {"type": "offer", "tenant_id": "t1"}, "action": "offer.read"})
	no := authz.decision with input as req
	failed(no) == {"consent"}
	yes := authz.decision with input as object.union(req, {"subject": object.union(customer(1), {"consents": ["marketing.personalize"]})})
	yes.allow
}

service(scopes) := {"id": "client-1", "type": "service", "aal": 1, "scopes": scopes, "tuples": [member]}

core_req(act, rtype) := object.union(base, {"purpose": "core.banking", "resource": {"type": rtype, "tenant_id": "t1"}, "action": act})

test_core_scopes if {
	w := authz.decision with input as object.union(core_req("posting.create", "posting"), {"subject": service(["core:write"])})
	w.allow
	r := authz.decision with input as object.union(core_req("posting.create", "posting"), {"subject": service(["core:read"])})
	failed(r) == {"scope"}
	read := authz.decision with input as object.union(core_req("account.read", "account"), {"subject": service(["core:write"])})
	read.allow
	cust := authz.decision with input as core_req("account.read", "account")
	"subject_type" in failed(cust)
}

# Closing an account or an overdraft line is a core route (POST .../close): a write scope.
test_core_close_needs_write_scope if {
	every act_rtype in [["account.close", "account"], ["overdraft_line.close", "overdraft_line"]] {
		w := authz.decision with input as object.union(core_req(act_rtype[0], act_rtype[1]), {"subject": service(["core:write"])})
		w.allow
		r := authz.decision with input as object.union(core_req(act_rtype[0], act_rtype[1]), {"subject": service(["core:read"])})
		failed(r) == {"scope"}
	}
}

op(act, rtype) := object.union(base, {"purpose": "operational", "resource": {"type": rtype, "tenant_id": "t1"}, "action": act})

test_operational_public_without_subject if {
	d := authz.decision with input as object.remove(op("platform.read", "platform"), ["subject"])
	d.allow
}

test_operational_private_actions_need_member if {
	anon := authz.decision with input as object.remove(op("session.list", "session"), ["subject"])
	not anon.allow
	"tenant_member" in failed(anon)
	mine := authz.decision with input as op("session.list", "session")
	mine.allow
}

test_operational_does_not_allow_unlisted_actions if {
	d := authz.decision with input as object.remove(op("unmapped", "unmapped"), ["subject"])
	failed(d) == {"purpose_resource", "purpose_action", "tenant_member"}
}

test_simulate_needs_ops_role if {
	no := authz.decision with input as op("authz.simulate", "authz")
	failed(no) == {"roles"}
	yes := authz.decision with input as object.union(op("authz.simulate", "authz"), {"subject": object.union(service([]), {"roles": ["ops"]})})
	yes.allow
}

test_suspended_tenant_admin_can_only_read_and_activate if {
	suspended := object.union(base.tenant, {"status": "SUSPENDED"})
	admin := object.union(service([]), {"roles": ["admin"]})
	act := authz.decision with input as object.union(op("tenant.activate_tenant", "tenant"), {"tenant": suspended, "subject": admin})
	act.allow
	other := authz.decision with input as object.union(op("product.create_product", "product"), {"tenant": suspended, "subject": admin})
	failed(other) == {"tenant_active"}
}

owns(tenant_id, caveat) := object.union(base.tenant, {"tuples": [{"relation": "owner", "object_ns": "tenant", "object_id": tenant_id, "caveat": caveat}]})

on_t2(act) := object.union(op(act, "tenant"), {"resource": {"type": "tenant", "tenant_id": "t2"}, "subject": object.union(service([]), {"roles": ["admin"]})})

test_owner_tenant_manages_the_tenant_it_created_through_owner_actions_only if {
	got := authz.decision with input as object.union(on_t2("tenant.get_tenant"), {"tenant": owns("t2", {})})
	got.allow
	suspend := authz.decision with input as object.union(on_t2("tenant.suspend_tenant"), {"tenant": owns("t2", {})})
	suspend.allow

	# Not an owner action: the other tenant stays out of reach.
	env := authz.decision with input as object.union(on_t2("environment.create_environment"), {"resource": {"type": "environment", "tenant_id": "t2"}, "tenant": owns("t2", {})})
	failed(env) == {"resource_tenant"}

	# Another tenant than the one owned, no tuple, an expired tuple: denied.
	t3 := authz.decision with input as object.union(on_t2("tenant.get_tenant"), {"resource": {"type": "tenant", "tenant_id": "t3"}, "tenant": owns("t2", {})})
	failed(t3) == {"resource_tenant"}
	none := authz.decision with input as on_t2("tenant.get_tenant")
	failed(none) == {"resource_tenant"}
	expired := authz.decision with input as object.union(on_t2("tenant.get_tenant"), {"tenant": owns("t2", {"expires_at": "2020-01-01T00:00:00Z"})})
	failed(expired) == {"resource_tenant"}
}

test_versions_reported if {
	d := authz.decision with input as base with data.meta as {"policy_version": "abc123"}
	d.policy_version == "abc123"
	d.registry_version == data.registry.version
}

test_missing_fields_never_allow if {
	d := authz.decision with input as {}
	not d.allow
}

test_beneficiary_manage_at_aal1_offers_step_up if {
	req := object.union(base, {"purpose": "customer.beneficiary.manage", "resource": {"type": "beneficiary", "tenant_id": "t1"}, "action": "beneficiary.create"})
	d := authz.decision with input as req
	d.code == "MFA_REQUIRED"
	d.step_up
	failed(d) == {"min_aal", "step_up"}
}

# Issue 13 items 1-2: every action that moves money or changes who or what can authorise it
# needs a step-up for this very request, not yet used: an AAL 2 token stepped up for another
# request (or one already used) is asked for a new one; reads stay at their purpose's AAL.
stepped_up_elsewhere := object.union(customer(2), {"stepup_bound": false})

bound_request(purpose, rtype, act) := object.union(base, {"purpose": purpose, "resource": {"type": rtype, "tenant_id": "t1", "id": "x"}, "action": act})

bound_actions := [
	["customer.transact", "transaction", "transfer.create"],
	["customer.beneficiary.manage", "beneficiary", "beneficiary.create"],
	["customer.beneficiary.manage", "beneficiary", "beneficiary.delete"],
	["operational", "customer_auth", "device.register"],
	["operational", "customer_auth", "device.revoke"],
	["operational", "customer_auth", "session.revoke"],
]

# One test per action: each evaluates two whole decisions, well inside opa's per-test timeout.
request_bound_ok(a) if {
	req := bound_request(a[0], a[1], a[2])
	elsewhere := authz.decision with input as object.union(req, {"subject": stepped_up_elsewhere})
	elsewhere.code == "MFA_REQUIRED"
	elsewhere.step_up
	failed(elsewhere) == {"step_up"}
	here := authz.decision with input as object.union(req, {"subject": customer(2)})
	here.allow
}

test_transfer_create_needs_a_step_up_for_this_request if request_bound_ok(bound_actions[0])

test_payee_add_needs_a_step_up_for_this_request if request_bound_ok(bound_actions[1])

test_payee_remove_needs_a_step_up_for_this_request if request_bound_ok(bound_actions[2])

test_device_registration_needs_a_step_up_for_this_request if request_bound_ok(bound_actions[3])

test_device_removal_needs_a_step_up_for_this_request if request_bound_ok(bound_actions[4])

test_revoking_another_session_needs_a_step_up_for_this_request if request_bound_ok(bound_actions[5])

test_registry_lists_the_request_bound_actions if {
	listed := {[p.name, a] | some p in data.registry.purposes; some a in object.get(p, "request_bound_actions", [])}
	listed == {[a[0], a[2]] | some a in bound_actions}
}

test_reads_need_no_request_bound_step_up if {
	payees := authz.decision with input as object.union(bound_request("customer.beneficiary.manage", "beneficiary", "beneficiary.list"), {"subject": stepped_up_elsewhere})
	payees.allow
	devices := authz.decision with input as bound_request("operational", "customer_auth", "device.list")
	devices.allow
	confirm := authz.decision with input as object.union(bound_request("customer.transact", "transaction", "transfer.confirm"), {"subject": stepped_up_elsewhere})
	confirm.allow
}

test_revoking_the_current_session_is_a_logout if {
	own := object.union(bound_request("operational", "customer_auth", "session.revoke"), {"resource": {"type": "customer_auth", "tenant_id": "t1", "id": "s1", "attrs": {"current_session": true}}})
	d := authz.decision with input as own
	d.allow
	other := authz.decision with input as object.union(own, {"resource": object.union(own.resource, {"attrs": {"current_session": false}})})
	other.code == "MFA_REQUIRED"
}

test_registry_without_version_reports_unknown if {
	d := authz.decision with input as base with data.registry as {"purposes": []}
	d.registry_version == "unknown"
	not d.allow
}

test_completing_step_up_is_never_blocked_by_step_up if {
	req := object.union(op("auth.stepup", "customer_auth"), {"context": object.union(base.context, {"risk": "high"})})
	d := authz.decision with input as req
	d.allow
	other := authz.decision with input as object.union(op("session.list", "session"), {"context": object.union(base.context, {"risk": "high"})})
	other.code == "MFA_REQUIRED"
}

test_api_key_with_payments_write_may_transfer_for_its_tenant_only if {
	key := {"id": "pk_live_x", "type": "service", "aal": 1, "scopes": ["payments:write"], "tuples": [member]}
	ok := authz.decision with input as object.union(transfer, {"subject": key})
	ok.allow
	no_scope := authz.decision with input as object.union(transfer, {"subject": object.union(key, {"scopes": ["payments:read"]})})
	failed(no_scope) == {"scope"}
	other := authz.decision with input as object.union(transfer, {"subject": key, "resource": {"type": "transaction", "tenant_id": "t2"}})
	failed(other) == {"resource_tenant"}
}

test_customers_need_no_scopes if {
	d := authz.decision with input as object.union(transfer, {"subject": customer(2)})
	d.allow
}

# Issue 20 item 4: the staff purposes as the gateway's routes ask for them.
hold_place := object.union(base, {"purpose": "fraud.review", "resource": {"type": "fraud_hold", "tenant_id": "t1"}, "action": "fraud_hold.place"})

test_fraud_hold_needs_fraud_role_and_aal2 if {
	ok := authz.decision with input as object.union(hold_place, {"subject": staff(["fraud"], 2)})
	ok.allow
	low := authz.decision with input as object.union(hold_place, {"subject": staff(["fraud"], 1)})
	failed(low) == {"min_aal"}
	wrong := authz.decision with input as object.union(hold_place, {"subject": staff(["support"], 2)})
	failed(wrong) == {"roles"}
}

test_support_lookup_is_masked if {
	req := object.union(base, {"purpose": "support.investigate", "resource": {"type": "customer", "tenant_id": "t1"}, "action": "customer.read", "subject": staff(["support"], 1)})
	d := authz.decision with input as req
	d.allow
	d.obligations.masking.customer.level == "masked"
	d.obligations.masking.customer.card_number == "keep_suffix4"
}

test_field_policies_only_full_or_masked if {
	every p in data.registry.purposes {
		every _, level in p.field_policies {
			level in {"full", "masked"}
		}
	}
}

test_consent_actions_for_customers if {
	req := object.union(base, {"purpose": "operational", "resource": {"type": "consent", "tenant_id": "t1"}, "action": "consent.withdraw"})
	d := authz.decision with input as req
	d.allow
}

# The hot-path verdict is the traced decision without its trace, and `failed` names exactly the
# checks `reasons` marks not ok, in the same order, for allows, step-ups, denials and an unknown purpose.
verdict_matches_decision(req) if {
	d := authz.decision with input as req
	v := authz.verdict with input as req
	object.remove(d, ["reasons"]) == v
	[r.check | some r in d.reasons; not r.ok] == authz.failed with input as req
}

test_verdict_is_the_decision_without_reasons if {
	verdict_matches_decision(base)
	verdict_matches_decision(transfer)
	verdict_matches_decision(object.union(base, {"resource": {"type": "account", "tenant_id": "t2"}}))
	verdict_matches_decision(object.union(base, {"subject": {"id": "c1", "type": "customer", "aal": 1, "tuples": []}}))
	verdict_matches_decision(object.union(base, {"purpose": "no.such.purpose"}))
	verdict_matches_decision(object.union(base, {"tenant": {"id": "t1", "status": "SUSPENDED", "security": {}}}))
}

test_verdict_step_up_and_denial_outcomes if {
	v := authz.verdict with input as transfer
	v.step_up
	v.code == "MFA_REQUIRED"
	w := authz.verdict with input as object.union(base, {"resource": {"type": "account", "tenant_id": "t2"}})
	w.code == "POLICY_DENIED"
	contains(w.message, "resource_tenant")
}

person(level, roles) := {"id": "staff:u1", "type": "user", "staff": true, "roles": roles, "aal": level, "tuples": [member], "stepup_bound": false}

test_staff_below_aal2_steps_up_for_key_rotation_a_service_token_does_not if {
	req := object.union(op("signing_key.rotate_keys", "signing_key"), {"subject": person(1, ["admin"])})
	d := authz.decision with input as req
	d.code == "MFA_REQUIRED"
	signed_in_at_aal2 := authz.decision with input as object.union(req, {"subject": person(2, ["admin"])})
	signed_in_at_aal2.code == "MFA_REQUIRED"
	ok := authz.decision with input as object.union(req, {"subject": object.union(person(2, ["admin"]), {"stepup_bound": true})})
	ok.allow
	svc := authz.decision with input as object.union(object.remove(req, ["subject"]), {"subject": {"id": "service-token:x", "type": "service", "roles": ["admin"], "scopes": [], "aal": 1, "tuples": [member]}})
	svc.allow
	wrong_role := authz.decision with input as object.union(req, {"subject": person(1, ["ops"])})
	wrong_role.code == "POLICY_DENIED"
}

test_staff_tuple_writes_and_deletes_both_need_a_bound_step_up if {
	every act in ["tuple.write_tuple", "tuple.delete_tuple"] {
		req := object.union(op(act, "relationship_tuple"), {"resource": {"type": "relationship_tuple", "tenant_id": "t1"}, "subject": person(2, ["admin"])})
		d := authz.decision with input as req
		d.code == "MFA_REQUIRED"
		ok := authz.decision with input as object.union(req, {"subject": object.union(person(2, ["admin"]), {"stepup_bound": true})})
		ok.allow
	}
}

test_staff_webhook_secret_rotation_needs_aal2_pausing_does_not if {
	req := object.union(op("webhook.update_webhook", "webhook"), {"subject": person(1, ["admin"])})
	pause := authz.decision with input as req
	pause.allow
	rotate := authz.decision with input as object.union(req, {"resource": {"type": "webhook", "tenant_id": "t1", "attrs": {"rotates_secret": true}}})
	rotate.code == "MFA_REQUIRED"
}

test_staff_revoking_own_session_is_signing_out if {
	req := object.union(op("session.admin_revoke", "session"), {"subject": person(1, ["admin"])})
	other := authz.decision with input as req
	other.code == "MFA_REQUIRED"
	own := authz.decision with input as object.union(req, {"resource": {"type": "session", "tenant_id": "t1", "attrs": {"current_session": true}}})
	own.allow
}

test_staff_fraud_review_below_aal2_steps_up if {
	req := object.union(base, {"purpose": "fraud.review", "resource": {"type": "account", "tenant_id": "t1"}, "action": "account.read", "subject": person(1, ["fraud"])})
	d := authz.decision with input as req
	d.code == "MFA_REQUIRED"
}

# Issue 20 item 3 (SPEC 2.7): `parent` is the platform operator's read-only view of a tenant it owns.
parent_of(tenant_id, platform) := object.union(base.tenant, {"platform": platform, "tuples": [{"relation": "parent", "object_ns": "tenant", "object_id": tenant_id, "caveat": {}}]})

tuples_of_t2(act) := object.union(op(act, "relationship_tuple"), {"resource": {"type": "relationship_tuple", "tenant_id": "t2"}, "subject": object.union(service([]), {"roles": ["admin"]})})

test_parent_is_the_platform_tenants_view_only if {
	view := authz.decision with input as object.union(tuples_of_t2("tuple.list_tuples"), {"tenant": parent_of("t2", true)})
	view.allow

	# A view, not management: writing the child's tuples needs `owner`.
	write := authz.decision with input as object.union(tuples_of_t2("tuple.delete_tuple"), {"tenant": parent_of("t2", true)})
	failed(write) == {"resource_tenant"}
	owned := authz.decision with input as object.union(tuples_of_t2("tuple.delete_tuple"), {"tenant": owns("t2", {})})
	owned.allow

	# A parent tuple held by a tenant that is not the platform's grants nothing.
	not_platform := authz.decision with input as object.union(tuples_of_t2("tuple.list_tuples"), {"tenant": parent_of("t2", false)})
	failed(not_platform) == {"resource_tenant"}

	# Parent never stands in for membership: a customer holding one is still no member of t2.
	c := object.union(customer(1), {"tuples": [{"relation": "parent", "object_ns": "tenant", "object_id": "t1", "caveat": {}}]})
	cust := authz.decision with input as object.union(base, {"subject": c})
	failed(cust) == {"tenant_member"}

	expired := authz.decision with input as object.union(tuples_of_t2("tuple.list_tuples"), {"tenant": object.union(base.tenant, {"platform": true, "tuples": [{"relation": "parent", "object_ns": "tenant", "object_id": "t2", "caveat": {"expires_at": "2020-01-01T00:00:00Z"}}]})})
	failed(expired) == {"resource_tenant"}
}

# Issue 20 item 3 (SPEC 2.7): a delegated payer's transfer needs the payer tuple and still the
# payer's own request-bound step-up.
payer_of(customer_id, caveat) := {"relation": "payer", "object_ns": "customer", "object_id": customer_id, "caveat": caveat}

delegated(tuples, level, bound_req) := object.union(transfer, {
	"subject": {"id": "c1", "type": "customer", "aal": level, "tuples": tuples, "stepup_bound": bound_req},
	"resource": {"type": "transaction", "tenant_id": "t1", "attrs": {"payer_for": "c2"}},
})

test_payer_transfers_need_the_tuple_and_their_own_step_up if {
	ok := authz.decision with input as delegated([member, payer_of("c2", {})], 2, true)
	ok.allow

	# Without a step-up bound to this request the payer is asked for one, as for their own money.
	step := authz.decision with input as delegated([member, payer_of("c2", {})], 1, false)
	step.code == "MFA_REQUIRED"
	at_aal2_unbound := authz.decision with input as delegated([member, payer_of("c2", {})], 2, false)
	at_aal2_unbound.code == "MFA_REQUIRED"

	# No payer tuple, one for another customer, or an expired one: denied, and no step-up offered.
	none := authz.decision with input as delegated([member], 2, true)
	failed(none) == {"delegated_payer"}
	none.code == "POLICY_DENIED"
	other := authz.decision with input as delegated([member, payer_of("c3", {})], 2, true)
	failed(other) == {"delegated_payer"}
	expired := authz.decision with input as delegated([member, payer_of("c2", {"expires_at": "2020-01-01T00:00:00Z"})], 2, true)
	failed(expired) == {"delegated_payer"}
	unbound_too := authz.decision with input as delegated([member], 1, false)
	unbound_too.code == "POLICY_DENIED"

	# payer grants no reading of the other customer's accounts.
	read := authz.decision with input as object.union(base, {"subject": object.union(customer(1), {"tuples": [member, payer_of("c2", {})]}), "resource": {"type": "account", "tenant_id": "t1", "attrs": {"payer_for": "c2"}}})
	failed(read) == {"delegated_payer"}

	verdict_matches_decision(delegated([member], 2, true))
	verdict_matches_decision(delegated([member, payer_of("c2", {})], 1, false))
}

# Issue 20 item 1: a tenant's Admin and Ops read its agents and outlets; ReadOnly does not.
test_agent_and_outlet_reads_are_admin_and_ops if {
	every act in [["agent.list_agents", "agent"], ["agent.get_agent", "agent"], ["outlet.list_outlets", "outlet"], ["outlet.get_outlet", "outlet"]] {
		every role in ["admin", "ops"] {
			ok := authz.decision with input as object.union(op(act[0], act[1]), {"subject": staff([role], 1)})
			ok.allow
		}
		ro := authz.decision with input as object.union(op(act[0], act[1]), {"subject": staff(["readonly"], 1)})
		failed(ro) == {"roles"}
	}
}
