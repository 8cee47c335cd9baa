/*
 * The staff sign-in page (issue 16 item 3): passkey enrolment from a one-time link, sign-in,
 * the signed-in person's passkeys and sessions, sign-out, and a step-up for a sensitive action.
 * Served by core with a CSP that allows no inline script; WebAuthn through ./webauthn.js
 * (global StaffWebAuthn). The access token lives in this tab's
 * sessionStorage only. Everything shown comes from the API and is set as text, never as HTML.
 */
'use strict';
(function () {
  const $ = (id) => document.getElementById(id);
  const wa = window.StaffWebAuthn;
  const store = window.sessionStorage;

  function status(text, isError) {
    const el = $('status');
    el.textContent = text;
    el.className = isError ? 'error' : '';
  }

  async function api(method, path, body, token) {
    const headers = { 'content-type': 'application/json' };
    if (token) headers.authorization = 'Bearer ' + token;
    const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: 'omit' });
    const text = await res.text();
    let json;
    try { json = text ? JSON.parse(text) : undefined; } catch (e) { json = undefined; }
    if (!res.ok) {
      const message = (json && (json.message || json.detail || json.code)) || ('HTTP ' + res.status);
      const err = new Error(message);
      err.status = res.status;
      throw err;
    }
    return json;
  }

  function fragment() {
    const p = new URLSearchParams(window.location.hash.replace(/^#/, ''));
    return { tenant: p.get('tenant'), enrol: p.get('enrol') };
  }

  function tenant() { return $('tenant').value.trim(); }

  function clearFragment() {
    window.history.replaceState(null, '', window.location.pathname);
  }

  async function enrol() {
    const f = fragment();
    try {
      status('Waiting for your authenticator…');
      const begun = await api('POST', '/auth/enrolment/begin', { tenantId: f.tenant, token: f.enrol });
      const response = await wa.startRegistration(begun.options);
      const name = $('enrol-name').value.trim() || undefined;
      await api('POST', '/auth/enrolment/finish', { tenantId: f.tenant, token: f.enrol, response, name });
      clearFragment();
      $('enrol').hidden = true;
      status('Passkey registered for ' + begun.userName + '. You can sign in now.');
    } catch (e) {
      status('Registration failed: ' + e.message, true);
    }
  }

  async function signIn() {
    if (!tenant()) { status('Enter your organisation first.', true); return; }
    try {
      status('Waiting for your authenticator…');
      const begun = await api('POST', '/auth/login', { method: 'passkey', step: 'begin', tenantId: tenant() });
      const response = await wa.startAuthentication(begun.options);
      const tokens = await api('POST', '/auth/login', { method: 'passkey', step: 'finish', tenantId: tenant(), response });
      store.setItem('staff.accessToken', tokens.accessToken);
      store.setItem('staff.tenant', tenant());
      window.localStorage.setItem('staff.lastTenant', tenant());
      status('Signed in.');
      await showAccount();
    } catch (e) {
      status('Sign-in failed: ' + e.message, true);
    }
  }

  function token() { return store.getItem('staff.accessToken'); }

  function item(list, text, muted, buttons) {
    const li = document.createElement('li');
    li.appendChild(document.createTextNode(text));
    if (muted) {
      const span = document.createElement('span');
      span.className = 'muted';
      span.textContent = ' ' + muted;
      li.appendChild(span);
    }
    for (const [label, onClick] of buttons || []) {
      const b = document.createElement('button');
      b.type = 'button';
      b.textContent = label;
      b.addEventListener('click', onClick);
      li.appendChild(b);
    }
    list.appendChild(li);
  }

  async function showAccount() {
    const t = token();
    if (!t) return;
    try {
      const [pk, ss] = await Promise.all([api('GET', '/auth/passkeys', undefined, t), api('GET', '/auth/sessions', undefined, t)]);
      $('user-name').textContent = pk.userName;
      const list = $('passkeys');
      list.replaceChildren();
      for (const p of pk.passkeys) {
        item(list, p.name, '(added ' + p.createdAt.slice(0, 10) + (p.lastUsedAt ? ', last used ' + p.lastUsedAt.slice(0, 16).replace('T', ' ') : '') + ')', [
          ['Rename', () => rename(p)],
          ['Remove', () => remove(p)],
        ]);
      }
      const sessions = $('sessions');
      sessions.replaceChildren();
      for (const s of ss.sessions) {
        item(sessions, (s.current ? 'This session' : 'Session') + ' since ' + s.createdAt.slice(0, 16).replace('T', ' '), '(AAL ' + s.aal + (s.ip ? ', ' + s.ip : '') + ')');
      }
      $('signin').hidden = true;
      $('account').hidden = false;
    } catch (e) {
      if (e.status === 401) { store.clear(); status('Your session has ended; sign in again.', true); showSignedOut(); return; }
      status('Could not load your account: ' + e.message, true);
    }
  }

  function showSignedOut() {
    $('account').hidden = true;
    $('signin').hidden = false;
  }

  async function rename(p) {
    const name = window.prompt('New name for this passkey', p.name);
    if (!name) return;
    try {
      await api('PATCH', '/auth/passkeys/' + encodeURIComponent(p.id), { name: name.trim() }, token());
      await showAccount();
    } catch (e) { status('Rename failed: ' + e.message, true); }
  }

  async function remove(p) {
    if (!window.confirm('Remove the passkey "' + p.name + '"? It will no longer sign you in.')) return;
    try {
      await api('DELETE', '/auth/passkeys/' + encodeURIComponent(p.id), undefined, token());
      status('Passkey removed.');
      await showAccount();
    } catch (e) { status('Remove failed: ' + e.message, true); }
  }

  async function signOut() {
    try {
      await api('POST', '/auth/logout', {}, token());
    } catch (e) {
      // already ended: signing out here is all that is left to do
    }
    store.clear();
    showSignedOut();
    status('Signed out.');
  }

  async function stepUp() {
    const out = $('stepup-result');
    out.className = '';
    try {
      const request = { method: $('stepup-method').value, path: $('stepup-path').value.trim() };
      const ch = await api('POST', '/auth/mfa/challenge', request, token());
      out.textContent = 'Waiting for your authenticator…';
      const response = await wa.startAuthentication(ch.publicKey);
      const done = await api('POST', '/auth/mfa/complete', { challengeToken: ch.challenge, response }, token());
      store.setItem('staff.stepUpToken', done.accessToken);
      out.textContent = 'Confirmed: an AAL ' + done.aal + ' token for ' + request.method + ' ' + request.path + ', usable once within ' + Math.round(done.expiresIn / 60) + ' minutes.';
    } catch (e) {
      out.className = 'error';
      out.textContent = 'Confirmation failed: ' + e.message;
    }
  }

  function start() {
    if (!wa || !wa.supported()) { status('This browser does not support passkeys.', true); return; }
    const f = fragment();
    $('tenant').value = f.tenant || store.getItem('staff.tenant') || window.localStorage.getItem('staff.lastTenant') || '';
    if (f.enrol && f.tenant) {
      $('enrol').hidden = false;
      $('enrol-user').textContent = 'your account at ' + f.tenant;
    }
    $('enrol-button').addEventListener('click', enrol);
    $('signin-button').addEventListener('click', signIn);
    $('signout-button').addEventListener('click', signOut);
    $('stepup-button').addEventListener('click', stepUp);
    if (token()) void showAccount();
  }

  start();
})();
