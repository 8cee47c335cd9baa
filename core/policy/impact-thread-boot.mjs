// Worker entry for core's impact worker: loader hooks are per thread, so this thread registers
// tsx's loader before it loads the TypeScript module (core/policy/impact-thread.ts).
import { register } from 'tsx/esm/api';

register();
await import('./impact-thread.ts');
