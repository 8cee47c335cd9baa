-- Stored responses already written keep an enrolment link's token in its `path`
-- (`/staff#tenant=…&enrol=<token>`): core/idempotency/secrets.ts now redacts a string carrying
-- a secret as a URL parameter; redact the rows written before it in place. Such a row also
-- carried the link's `token` field, so its original is sealed (response_sealed) and its
-- replay is unchanged: only the inspection copy loses the token.
UPDATE idempotency_keys
   SET response_body = regexp_replace(response_body,
         '"((\\.|[^"\\])*[#?&](enrol|token|access_token|refresh_token)=(\\.|[^"\\])*)"', '"[redacted]"', 'gi')
 WHERE response_body ~* '[#?&](enrol|token|access_token|refresh_token)=';
