// Worker entry for the decision audit thread: loader hooks are per thread, so this thread
// registers tsx's loader before it loads the TypeScript module (edge/audit-thread.ts).
import { register } from 'tsx/esm/api';

register();
await import('./audit-thread.ts');
