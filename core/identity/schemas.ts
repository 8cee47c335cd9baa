/** Request fields shared by identity routes (SPEC 4.2, 8). */
import { Type } from '@sinclair/typebox';

export { TenantId } from '../../shared/tenant-id.ts';
/** SPEC 8: E.164, `+` then 7 to 15 digits. */
export const Phone = Type.String({ pattern: '^\\+[0-9]{7,15}$', description: 'E.164 phone number' });
/** SPEC 8: 4 to 6 digits. */
export const Pin = Type.String({ pattern: '^[0-9]{4,6}$', description: '4 to 6 digits' });
/** SPEC 8: 4 to 8 characters. */
export const Otp = Type.String({ minLength: 4, maxLength: 8, description: 'One-time code' });
export const OpaqueToken = Type.String({ minLength: 16, maxLength: 512 });
