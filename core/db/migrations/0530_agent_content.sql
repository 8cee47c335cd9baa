-- Agent content and training (issue 9 item 10). Tenant-scoped like every table.

-- Announcements targeted by tenant (the row's tenant), outlet region and agent tier; an empty
-- array means "every region" / "every tier".
CREATE TABLE agent_announcements (
  tenant_id  text NOT NULL REFERENCES tenants (id),
  id         uuid NOT NULL,
  title      text NOT NULL CHECK (length(title) BETWEEN 1 AND 200),
  body       text NOT NULL CHECK (length(body) BETWEEN 1 AND 4000),
  regions    text[] NOT NULL DEFAULT '{}',
  tiers      text[] NOT NULL DEFAULT '{}' CHECK (tiers <@ ARRAY['basic', 'standard', 'super']),
  starts_at  timestamptz NOT NULL,
  ends_at    timestamptz,
  created_at timestamptz NOT NULL,
  PRIMARY KEY (tenant_id, id),
  CHECK (ends_at IS NULL OR ends_at > starts_at)
);
CREATE INDEX agent_announcements_live_idx ON agent_announcements (tenant_id, starts_at DESC);

-- A course may unlock one capability (core/agents/capabilities.ts): an agent has it only
-- after passing the course's quiz.
CREATE TABLE agent_courses (
  tenant_id  text NOT NULL REFERENCES tenants (id),
  id         uuid NOT NULL,
  code       text NOT NULL CHECK (code ~ '^[a-z0-9-]{2,40}$'),
  title      text NOT NULL,
  summary    text NOT NULL DEFAULT '',
  unlocks    text,
  position   integer NOT NULL DEFAULT 0,
  created_at timestamptz NOT NULL,
  PRIMARY KEY (tenant_id, id),
  UNIQUE (tenant_id, code)
);

-- questions: [{id, prompt, options: [text], answer: index}] (answers never leave core).
CREATE TABLE agent_quizzes (
  tenant_id     text NOT NULL,
  id            uuid NOT NULL,
  course_id     uuid NOT NULL,
  pass_mark_pct smallint NOT NULL CHECK (pass_mark_pct BETWEEN 1 AND 100),
  max_attempts  smallint NOT NULL CHECK (max_attempts BETWEEN 1 AND 20),
  questions     jsonb NOT NULL CHECK (jsonb_typeof(questions) = 'array' AND jsonb_array_length(questions) > 0),
  created_at    timestamptz NOT NULL,
  PRIMARY KEY (tenant_id, id),
  UNIQUE (tenant_id, course_id),
  FOREIGN KEY (tenant_id, course_id) REFERENCES agent_courses (tenant_id, id)
);

-- One row per scored attempt; (quiz, agent, attempt_no) unique, so two concurrent submissions
-- cannot both be "attempt 3".
CREATE TABLE agent_quiz_attempts (
  tenant_id   text NOT NULL,
  id          uuid NOT NULL,
  quiz_id     uuid NOT NULL,
  agent_id    uuid NOT NULL,
  attempt_no  smallint NOT NULL CHECK (attempt_no >= 1),
  score_pct   smallint NOT NULL CHECK (score_pct BETWEEN 0 AND 100),
  passed      boolean NOT NULL,
  answers     jsonb NOT NULL,
  created_at  timestamptz NOT NULL,
  PRIMARY KEY (tenant_id, id),
  UNIQUE (tenant_id, quiz_id, agent_id, attempt_no),
  FOREIGN KEY (tenant_id, quiz_id) REFERENCES agent_quizzes (tenant_id, id),
  FOREIGN KEY (tenant_id, agent_id) REFERENCES agents (tenant_id, id)
);
CREATE INDEX agent_quiz_attempts_agent_idx ON agent_quiz_attempts (tenant_id, agent_id, quiz_id);
